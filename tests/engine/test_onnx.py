"""The ONNX Runtime sessions are set up for a long-running daemon."""

from __future__ import annotations

from appliance.engine.onnx import _session
from tests.fakes.voice import real_voice


def test_sessions_cache_no_memory_pattern_per_shape() -> None:
    # Patterns are cached per input shape for the life of the session; with shapes
    # changing every request that is unbounded growth (the soak's RSS creep).
    voice, _ = real_voice()
    assert voice.decoder_path is not None
    session = _session(voice.decoder_path, threads=1)
    assert session.get_session_options().enable_mem_pattern is False
