"""The ONNX Runtime sessions are set up for a long-running daemon."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from appliance.model.engine import interrupt
from appliance.model.engine.base import BackendError
from appliance.model.engine.interrupt import Interrupted, StopToken
from appliance.model.engine.onnx import _session
from tests.fakes.voice import real_voice


def test_sessions_cache_no_memory_pattern_per_shape() -> None:
    # Patterns are cached per input shape for the life of the session; with shapes
    # changing every request that is unbounded growth (the soak's RSS creep).
    voice, _ = real_voice()
    assert voice.decoder_path is not None
    session = _session(voice.decoder_path, threads=1)
    assert session.get_session_options().enable_mem_pattern is False


def _long_latent(frames: int = 1200) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 192, frames)).astype(np.float32)


def test_a_stopped_decode_raises_interrupted_and_the_model_runs_on() -> None:
    _, model = real_voice()
    z = _long_latent()
    token = StopToken()
    started = time.monotonic()
    timer = threading.Timer(0.02, token.stop)
    timer.start()
    with interrupt.stoppable(token), pytest.raises(Interrupted):
        model.decode(z, None)
    timer.join()
    stopped_after = time.monotonic() - started
    # The same decode, not stopped: it runs to the end (and took longer than the stop).
    t0 = time.monotonic()
    with interrupt.stoppable(StopToken()):
        audio = model.decode(z, None)
    assert audio.size == 1200 * 256
    assert stopped_after < time.monotonic() - t0


def test_without_a_token_a_bad_input_is_a_backend_error() -> None:
    _, model = real_voice()
    with pytest.raises(BackendError):
        model.decode(np.zeros((1, 3, 10), dtype=np.float32), None)
    token = StopToken()
    with interrupt.stoppable(token), pytest.raises(BackendError):
        model.decode(np.zeros((1, 3, 10), dtype=np.float32), None)
