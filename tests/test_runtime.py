"""The voice model exactly as the daemon builds it (``Runtime.load``, bundled voice)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import parse_config
from appliance.engine.windows import decode_span
from appliance.runtime import Runtime


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    cfg = parse_config({"voices": {"cache_dir": str(voice_cache)}, "engine": {"workers": 1}})
    rt = Runtime.load(cfg)
    yield rt
    rt.close()


def test_the_first_clause_flow_is_windowed_in_the_daemons_model(runtime: Runtime) -> None:
    voice = runtime.voices[runtime.default_voice]
    assert runtime.info()["voices"][0]["flow"] == "windowed"
    model = voice.model
    ids = voice.phonemizer.ids("Turn left in two hundred metres.")
    enc = model.encode_prior(ids, voice.defaults, voice.default_speaker)
    # The prior only: z is left for the flow to fill window by window.
    assert model.flow_context > 0
    assert enc.ready == 0 and enc.z_p is not None
    # The first chunk runs the flow over its own frames (plus context), not the clause.
    first = 24
    audio = decode_span(model, enc, 0, first, 16, voice.hop)
    assert audio.shape[0] == first * voice.hop
    assert first + 16 <= enc.ready < enc.frames


def test_windows_use_the_voices_verified_context(runtime: Runtime) -> None:
    """The daemon's model decodes with the fewest context frames the cut's check passed
    (10 for the bundled voice), and the windows still match the fused model."""
    import numpy as np

    from appliance.engine.base import Scales
    from appliance.engine.windows import decode_windows
    from appliance.voices import CUT_TOLERANCE

    voice = runtime.voices[runtime.default_voice]
    assert voice.context == 10
    assert runtime.info()["voices"][0]["context_frames"] == 10
    ids = voice.phonemizer.ids("Turn left in two hundred metres, then keep right.")
    scales = Scales(0.0, voice.defaults.length_scale, 0.0)
    fused = voice.model.fused(ids, scales, voice.default_speaker)
    for window in (8, 24, 69):
        enc = voice.model.encode_prior(ids, scales, voice.default_speaker)
        windowed = decode_windows(voice.model, enc, window, voice.context, voice.hop)
        assert windowed.shape == fused.shape
        assert float(np.max(np.abs(windowed - fused))) <= CUT_TOLERANCE
    # Two frames fewer is measurably off: the check is not passing everything.
    enc = voice.model.encode_prior(ids, scales, voice.default_speaker)
    short = decode_windows(voice.model, enc, 8, voice.context - 2, voice.hop)
    assert float(np.max(np.abs(short - fused))) > CUT_TOLERANCE


def test_configured_context_overrides_the_voices(voice_cache: Path) -> None:
    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"workers": 1, "context_frames": 16},
        }
    )
    rt = Runtime.load(cfg)
    try:
        assert rt.voices[rt.default_voice].context == 16
    finally:
        rt.close()
