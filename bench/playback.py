"""Time to first sound and stop-to-silence, measured at a PulseAudio null sink.

``bench_playback(make_audio, sample_rate)`` starts a private PulseAudio server (see
:mod:`bench.pulsesink`), opens a :class:`Player` on it, records the sink's
monitor with ``parec`` and, per run:

1. ``t0`` = the request: :meth:`Player.submit`, then ``make_audio()`` is called and its
   chunks are pushed as they come (so synthesis time, i.e. TTFP, is inside the figure when
   ``make_audio`` synthesizes; ``ttfp_ms`` = ``t0`` → first chunk);
2. first sound = the first recorded sample louder than ``threshold`` after ``t0``; its time
   comes from the recording's clock (see :class:`~bench.pulsesink.Recording`:
   sample index → monotonic time, an estimate that errs late by the monitor's delivery
   delay, a few ms).  The audio's own lead-in (quiet samples before its first loud one,
   found with the same threshold) is subtracted, so a voice that starts with 40 ms of
   near-silence is not charged to the player;
3. ``stop_at_s`` after the first chunk was handed to the device, :meth:`Player.stop` at
   ``ts``; silence = the end of the last loud sample; ``stop_to_silence_ms`` = silence − ts.

Figures are medians (and min/max) over the runs, in ms.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from appliance.ops.config import PlaybackConfig
from appliance.playback.player import Player
from bench.pulsesink import PulseServer, first_loud, last_loud

AudioSource = Callable[[], Iterable[npt.NDArray[np.float32]] | npt.NDArray[np.float32]]


def _summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def bench_playback(
    make_audio: AudioSource,
    sample_rate: int,
    *,
    runs: int = 5,
    cfg: PlaybackConfig | None = None,
    stop_at_s: float = 0.3,
    threshold: float = 0.02,
) -> dict[str, Any]:
    """Measure submit → first sound and stop → silence on a private null sink.

    ``make_audio`` returns float32 mono samples at ``sample_rate``: one array or an
    iterable of chunks (a synthesis stream).  It should last longer than ``stop_at_s``.
    """
    cfg = cfg or PlaybackConfig()
    saved = {
        k: os.environ.get(k) for k in ("PULSE_SERVER", "PULSE_CLIENTCONFIG", "ALSA_CONFIG_PATH")
    }
    with tempfile.TemporaryDirectory(prefix="ttsd-bench-") as tmp:
        server = PulseServer.start(Path(tmp))
        os.environ.update(server.env)
        player = Player.open(cfg, rescan=True)
        try:
            return _run(player, server, make_audio, sample_rate, runs, stop_at_s, threshold)
        finally:
            player.close()
            server.stop()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _run(
    player: Player,
    server: PulseServer,
    make_audio: AudioSource,
    sample_rate: int,
    runs: int,
    stop_at_s: float,
    threshold: float,
) -> dict[str, Any]:
    if player.health()["state"] != "ok":
        raise RuntimeError(f"no playback on the null sink: {player.health()}")
    deadline = time.monotonic() + 10
    while player.stats()["callbacks"] < 50 and time.monotonic() < deadline:
        time.sleep(0.05)  # ALSA's pulse plugin may pause ~2 s after opening
    ttfs: list[float] = []
    ttfp: list[float] = []
    stop: list[float] = []
    reported: list[float] = []
    underruns_before = player.stats()["underruns"]
    with server.record() as rec:
        for i in range(runs):
            time.sleep(0.3)  # silence between runs, so each first sound is unambiguous
            t0 = time.monotonic()
            utt = player.submit("message", 1.0, sample_rate, client_key=("bench", i))
            audio = make_audio()
            chunks = [audio] if isinstance(audio, np.ndarray) else audio
            lead_in: int | None = None
            pushed = 0
            for chunk in chunks:
                chunk = np.asarray(chunk, dtype=np.float32).reshape(-1)
                if pushed == 0:
                    ttfp.append(1000 * (time.monotonic() - t0))
                if lead_in is None:
                    loud = first_loud(chunk, threshold)
                    if loud >= 0:
                        lead_in = pushed + loud
                pushed += chunk.size
                utt.push(chunk)
            utt.finish()
            utt.wait_started_sync(timeout=10)
            if utt.latency_ms is not None:
                reported.append(utt.latency_ms)
            if utt.started_at is not None:
                time.sleep(max(0.0, utt.started_at + stop_at_s - time.monotonic()))
            ts = time.monotonic()
            player.stop(("bench", i))
            utt.wait_ended_sync(timeout=10)
            # Silence must have been recorded for a while after the stop, however late the
            # monitor's data comes in on a busy machine.
            rec.wait_covered(max(time.monotonic(), ts + 0.15) + 0.05)
            x = rec.samples()
            start = max(0, rec.index_at(t0))
            first = first_loud(x[start:], threshold)
            if first < 0 or lead_in is None:
                continue
            lead_s = lead_in / sample_rate
            ttfs.append(1000 * (rec.time_of(start + first) - t0 - lead_s))
            last = last_loud(x[start:], threshold)
            stop.append(1000 * (rec.time_of(start + last + 1) - ts))
    health = player.health()
    return {
        "device": health["device"],
        "sample_rate": health["sample_rate"],
        "sink_rate": server.rate,
        "latency_setting": health["latency_setting"],
        "latency_ms": health["latency_ms"],
        "priority": health["priority"],
        "runs": runs,
        "measured": len(ttfs),
        "ttfp_ms": _summary(ttfp),
        "first_sound_ms": _summary(ttfs),
        "first_sound_minus_ttfp_ms": _summary([a - b for a, b in zip(ttfs, ttfp, strict=False)]),
        "reported_latency_ms": _summary(reported),
        "stop_to_silence_ms": _summary(stop),
        "underruns": player.stats()["underruns"] - underruns_before,
        "method": "parec of the null sink's monitor; sample index -> monotonic time "
        "(lower envelope of read stamps); audio lead-in subtracted",
    }
