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
