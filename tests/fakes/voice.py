"""The real bundled voice, split and loaded on the CPU once per test session."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np

from appliance.model.engine.base import Encoded, Scales, VoiceModel, Window
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.voices import Voice, bundled_voice_path, load_voice
from appliance.speech import FloatArray, IntArray
from tests.fixtures import session_voice_cache


@functools.lru_cache(maxsize=1)
def _cache() -> Path:
    # The session's cache: the bundled voice cut there once serves this, the daemons and
    # the tests that load it there (a cut of its own here took 16-18 s of each full run).
    cache = session_voice_cache()
    if cache is None:
        cache = Path(tempfile.mkdtemp(prefix="ttsd-test-voice-"))
        atexit.register(shutil.rmtree, cache, True)
    return cache


@functools.lru_cache(maxsize=1)
def latent(frames: int) -> FloatArray:
    """A decoder's input of ``frames`` frames (the bundled voice's 192 channels), the same
    every call."""
    return np.random.default_rng(0).standard_normal((1, 192, frames)).astype(np.float32)


def real_voice() -> tuple[Voice, OnnxVoiceModel]:
    """``en_US-joe-medium`` cut into encoder/decoder halves, and its CPU model (1 thread)."""
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), _cache())
    assert voice.split_ok, voice.split_note
    cpu = OnnxVoiceModel.load(
        voice.model_path, voice.encoder_path, voice.decoder_path, voice.cut, 1
    )
    return voice, cpu


def flow_voice(cache: Path | None = None) -> tuple[Voice, OnnxVoiceModel]:
    """The bundled voice cut in ``cache`` (default: the session's, which the daemons share)
    and its CPU model with the flow a part of its own, as the daemon loads it (1 thread)."""
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), cache or _cache())
    assert voice.flow_split is not None and voice.cut is not None
    model = OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.decoder_path,
        voice.cut,
        1,
        flow=voice.flow_split,
    )
    return voice, model


class RecordingModel(VoiceModel):
    """A model passed through, noting each decode call's latent frames and urgency, each
    flow call's latent frames, and each encoder call's phoneme ids.

    It does not close the model it wraps: whoever built that one closes it."""

    backend_name = "recording"

    def __init__(self, inner: VoiceModel) -> None:
        self.inner = inner
        self.decodes: list[tuple[int, bool]] = []
        self.flows: list[int] = []
        self.encodes: list[int] = []

    @property
    def decoded(self) -> list[int]:
        """The latent frames of each decode call, in order."""
        return [frames for frames, _ in self.decodes]

    def encode(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        self.encodes.append(len(ids))
        return self.inner.encode(ids, scales, speaker)

    @property
    def flow_context(self) -> int:
        return self.inner.flow_context

    @property
    def retimes(self) -> bool:
        return self.inner.retimes

    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        self.encodes.append(len(ids))
        return self.inner.encode_prior(ids, scales, speaker)

    def flow(self, window: Window) -> FloatArray:
        self.flows.append(window.frames)
        return self.inner.flow(window)

    def decode(self, window: Window) -> FloatArray:
        self.decodes.append((window.frames, window.urgent))
        return self.inner.decode(window)

    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        return self.inner.fused(ids, scales, speaker)

    def release_memory(self) -> None:
        self.inner.release_memory()

    def close(self) -> None:
        """Nothing: the wrapped model belongs to its builder."""
