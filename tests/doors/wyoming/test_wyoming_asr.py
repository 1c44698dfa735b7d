"""ASR round trip of audio received over Wyoming (one-shot and streamed): pocketsphinx hears
the words, as well as it hears the same daemon's protocol v1 audio."""

from __future__ import annotations

import numpy as np
import pytest
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from appliance.clients.client import Client
from tests.asr import recognize, word_errors
from tests.conftest import Daemon
from tests.doors.wyoming.wyoming_helpers import request

SENTENCES = [
    ("Please turn on the kitchen lights.", "please turn on the kitchen lights"),
    (
        "The next train leaves from platform two in five minutes.",
        "the next train leaves from platform two in five minutes",
    ),
    (
        "Your order has been shipped, and it will arrive on Monday.",
        "your order has been shipped and it will arrive on monday",
    ),
    (
        "Warning: the battery is low. Please connect the charger!",
        "warning the battery is low please connect the charger",
    ),
    ("Good morning! It is sunny and warm today.", "good morning it is sunny and warm today"),
]
# The voice's noise is random (Wyoming has no field to turn it off), so each rendering is
# heard differently (0.11–0.27 seen for one text set): the margin allows that spread.
MARGIN = 0.2
RENDERS = 2
"""Each text rendered this many times on each path: one rendering of the set read from
0.09 to 0.34 over 22 runs, and a one-shot set at 0.32 against v1's 0.11 failed the margin
twice; over twice the words a path's rate spreads less, and the margin is the same."""


@pytest.mark.slow
async def test_wyoming_audio_is_intelligible(wy_uri: str, wy_daemon: Daemon) -> None:
    errors = {"one-shot": 0, "stream": 0, "v1": 0}
    total = 0
    for text, ref in SENTENCES * RENDERS:
        one = await request(wy_uri, Synthesize(text=text).event())
        deltas = [SynthesizeChunk(text=text[i : i + 4]).event() for i in range(0, len(text), 4)]
        streamed = await request(
            wy_uri,
            SynthesizeStart().event(),
            *deltas,
            Synthesize(text=text).event(),
            SynthesizeStop().event(),
            streaming=True,
        )
        with Client(wy_daemon.socket) as c:
            v1 = c.synthesize_all(text)
        v1_audio = np.frombuffer(v1.audio, dtype="<i2")
        for name, audio in (
            ("one-shot", one.audio()),
            ("stream", streamed.audio()),
            ("v1", v1_audio),
        ):
            e, n = word_errors(ref, recognize(audio, 22050))
            errors[name] += e
        total += n
    wer = {k: v / total for k, v in errors.items()}
    print("word error rates:", wer)
    assert wer["one-shot"] <= wer["v1"] + MARGIN, wer
    assert wer["stream"] <= wer["v1"] + MARGIN, wer
    assert wer["one-shot"] < 0.4 and wer["stream"] < 0.4, wer
