"""Markdown on the Wyoming door (issue 28): a conversation agent's reply is read as
Markdown by default (``wyoming.text_format: markdown``), one-shot and streamed; an event's
``text_format`` overrides it."""

from __future__ import annotations

import numpy as np
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from appliance.clients.client import Client
from tests.conftest import Daemon
from tests.doors.wyoming.wyoming_helpers import request

REPLY = "**Sure!** I turned on the *kitchen* lights:\n\n- ceiling\n- counter\n"
PLAIN = "Sure! I turned on the kitchen lights: ceiling. counter."


async def test_a_reply_is_read_as_markdown(wy_uri: str, wy_daemon: Daemon) -> None:
    one = await request(wy_uri, Synthesize(text=REPLY).event())
    deltas = [SynthesizeChunk(text=REPLY[i : i + 3]).event() for i in range(0, len(REPLY), 3)]
    streamed = await request(
        wy_uri,
        SynthesizeStart().event(),
        *deltas,
        Synthesize(text=REPLY).event(),
        SynthesizeStop().event(),
        streaming=True,
    )
    raw = await request(wy_uri, Event("synthesize", {"text": REPLY, "text_format": "text"}))
    with Client(wy_daemon.socket) as c:
        plain = np.frombuffer(c.synthesize_all(PLAIN).audio, dtype="<i2")
    for name, resp in (("one-shot", one), ("stream", streamed)):
        assert resp.error is None, name
        audio = resp.audio()
        # The markup is not said: the plain words' length (the voice's noise is random over
        # Wyoming, so lengths vary a little), far less than the reading as text.  The words
        # themselves are heard by ASR in tests/doors/v1/test_markdown_daemon.py.
        assert 0.75 < len(audio) / len(plain) < 1.3, (name, len(audio), len(plain))
        assert len(audio) < 0.7 * len(raw.audio()), name
