"""The real bundled voice, split and loaded on the CPU once per test session."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from appliance.engine.onnx import OnnxVoiceModel
from appliance.voices import Voice, bundled_voice_path, load_voice


@functools.lru_cache(maxsize=1)
def real_voice() -> tuple[Voice, OnnxVoiceModel]:
    """``en_US-joe-medium`` cut into encoder/decoder halves, and its CPU model (1 thread)."""
    cache = Path(tempfile.mkdtemp(prefix="ttsd-test-voice-"))
    atexit.register(shutil.rmtree, cache, True)
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), cache)
    assert voice.split_ok, voice.split_note
    cpu = OnnxVoiceModel.load(
        voice.model_path, voice.encoder_path, voice.decoder_path, voice.cut, 1
    )
    return voice, cpu
