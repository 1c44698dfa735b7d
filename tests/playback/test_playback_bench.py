"""The playback benchmark runs end to end and reports sane figures (no speed limits)."""

from __future__ import annotations

import time

import numpy as np

from appliance.ops.config import PlaybackConfig
from bench.playback import bench_playback
from tests.playback.audio import tone


def test_bench_playback_measures_first_sound_and_stop() -> None:
    calls: list[float] = []

    def make_audio() -> list[np.ndarray]:
        calls.append(time.monotonic())
        time.sleep(0.05)  # stands in for synthesis: it must show up in ttfp and first sound
        lead_in = np.zeros(2205, dtype=np.float32)  # 100 ms the player must not be charged
        return [lead_in, tone(440, 0.4), tone(440, 0.4)]

    result = bench_playback(
        make_audio, 22050, runs=2, cfg=PlaybackConfig(latency=0.02, sample_rate=48000)
    )
    assert len(calls) == 2 and result["measured"] == 2, result
    assert result["latency_setting"] == 0.02 and result["latency_ms"] > 0
    assert result["ttfp_ms"]["min"] >= 50
    # First sound comes after the synthesis time, and within a generous bound of it.
    assert 50 <= result["first_sound_ms"]["min"] <= result["first_sound_ms"]["max"] < 2000
    assert 0 <= result["stop_to_silence_ms"]["median"] < 500
