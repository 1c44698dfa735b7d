"""The ONNX Runtime sessions are set up for a long-running daemon."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from appliance.model.engine import interrupt
from appliance.model.engine.base import BackendError, Scales, Window
from appliance.model.engine.interrupt import Interrupted, StopToken
from appliance.model.engine.sessions import SHRINK_ABOVE_IDS, open_session
from appliance.ops import memory
from tests.fakes.voice import flow_voice, latent, real_voice


def test_sessions_cache_no_memory_pattern_per_shape() -> None:
    # Patterns are cached per input shape for the life of the session; with shapes
    # changing every request that is unbounded growth (the soak's RSS creep).
    voice, _ = real_voice()
    assert voice.decoder_path is not None
    session = open_session(voice.decoder_path, threads=1)
    assert session.get_session_options().enable_mem_pattern is False


def test_every_session_of_every_voice_allocates_from_one_shared_arena(
    voice_cache: Path, tmp_path: Path
) -> None:
    """On what `Runtime.load` builds with a second medium voice: each session's own arena kept
    its largest runs' buffers, per session and per voice (+33 MB of arenas after the warm-up
    of two voices against +8 MB shared: docs/speed.md)."""
    from appliance.core.runtime import Runtime
    from appliance.model.engine.onnx import OnnxVoiceModel
    from appliance.model.voices import bundled_voice_path
    from appliance.ops.config import parse_config

    bundled = bundled_voice_path()
    (tmp_path / "en_US-second-medium.onnx").symlink_to(bundled)
    (tmp_path / "en_US-second-medium.onnx.json").symlink_to(f"{bundled}.json")
    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache), "voices_dir": str(tmp_path)},
            "engine": {"backend": "onnx-cpu"},
        }
    )
    rt = Runtime.load(cfg, warm=False)
    try:
        assert len(rt.voices) == 2
        for v in rt.voices.values():
            model = v.model
            assert isinstance(model, OnnxVoiceModel)
            parts = [model._lean, model._decoder, model._prior, model._flow, model._encoder]
            sessions = list(filter(None, parts))
            assert len(sessions) >= 3  # a decoder, the prior and the flow (or the encoder)
            for session in sessions:
                opts = session.get_session_options()
                assert opts.get_session_config_entry("session.use_env_allocators") == "1"
    finally:
        rt.close()


def test_a_stopped_decode_raises_interrupted_and_the_model_runs_on() -> None:
    _, model = real_voice()
    z = latent(1200)
    token = StopToken()
    started = time.monotonic()
    timer = threading.Timer(0.02, token.stop)
    timer.start()
    with interrupt.stoppable(token), pytest.raises(Interrupted):
        model.decode(Window(z, None))
    timer.join()
    stopped_after = time.monotonic() - started
    # The same decode, not stopped: it runs to the end (and took longer than the stop).
    t0 = time.monotonic()
    with interrupt.stoppable(StopToken()):
        audio = model.decode(Window(z, None))
    assert audio.size == 1200 * 256
    assert stopped_after < time.monotonic() - t0


def test_without_a_token_a_bad_input_is_a_backend_error() -> None:
    _, model = real_voice()
    with pytest.raises(BackendError):
        model.decode(Window(np.zeros((1, 3, 10), dtype=np.float32), None))
    token = StopToken()
    with interrupt.stoppable(token), pytest.raises(BackendError):
        model.decode(Window(np.zeros((1, 3, 10), dtype=np.float32), None))


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmRSS"))


def test_release_memory_gives_back_what_short_runs_left_in_the_arena() -> None:
    """Runs too short to shrink the shared arena leave its regions resident, a heap trim
    or not; the quiet moment's release gives them back, and the model runs on unchanged
    (the daemon kept 179-208 MB after its heap trims over 1 200 mixed requests, by which
    runs had come last: docs/speed.md)."""
    _, model = flow_voice()
    scales = Scales(0.667, 1.0, 0.8)
    z = latent(60)
    before_release = model.decode(Window(z, None, (10, 10)))
    for n in (60, 120, SHRINK_ABOVE_IDS - 8):  # each short enough to leave the arena grown
        ids = np.array([1, 0, *[20, 0] * (n // 2), 2], dtype=np.int64)
        model.encode_prior(ids, scales, None)
    memory.trim()
    held = _rss_mb()
    model.release_memory()
    memory.trim()
    assert _rss_mb() < held - 1.0
    assert np.array_equal(model.decode(Window(z, None, (10, 10))), before_release)
