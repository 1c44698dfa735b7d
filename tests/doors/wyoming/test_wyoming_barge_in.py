"""Barge-in on Wyoming: a ``synthesize`` that comes while one is speaking interrupts it
(its audio stops at once; its ``audio-stop`` says how far the audio sent reaches in its
text), and the new one is answered next."""

from __future__ import annotations

import time

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.tts import Synthesize

from tests.doors.wyoming.wyoming_helpers import LONG_TEXT, client_for, read_response

TEXT = " ".join([LONG_TEXT] * 3)  # ~35 s of audio: far more than is made before the cut


async def test_a_new_synthesize_interrupts_the_one_speaking(wy_uri: str) -> None:
    async with client_for(wy_uri) as c:
        await c.write_event(Synthesize(text=TEXT).event())
        chunks = 0
        while chunks < 2:
            ev = await c.read_event()
            assert ev is not None
            chunks += AudioChunk.is_type(ev.type)
        await c.write_event(Synthesize(text="Second one.").event())
        t_cut = time.monotonic()
        after = 0
        while True:  # the rest of the first request
            ev = await c.read_event()
            assert ev is not None, "closed"
            if AudioChunk.is_type(ev.type):
                after += len(AudioChunk.from_event(ev).audio)
            elif AudioStop.is_type(ev.type):
                stop = ev
                break
            else:
                raise AssertionError(ev.type)
        stopped_after = time.monotonic() - t_cut
        second = await read_response(c)
    # What was in flight when the new synthesize was read, not the ~35 s the text holds.
    assert after / (22050 * 2) < 3.0, after
    assert stopped_after < 10.0
    lo, hi = stop.data["sent_text_span"]
    assert 0 <= lo < hi < len(TEXT)  # mid-text: the two chunks sent reach into it
    assert second.error is None and AudioStart.is_type(second.types[0])
    assert len(second.audio()) / 22050 > 0.4
    assert "sent_text_span" not in second.events[-1].data  # spoken whole: nothing to report
