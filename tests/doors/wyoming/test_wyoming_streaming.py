"""Text that streams in: the exact event sequence Home Assistant's Wyoming TTS entity sends
when a language model streams its answer."""

from __future__ import annotations

import asyncio
import time

from wyoming.audio import AudioChunk
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from tests.doors.wyoming.wyoming_helpers import LONG_TEXT, client_for, read_response


def tokens(text: str, size: int = 4) -> list[str]:
    """3–5-character deltas, as a language model writes them."""
    return [text[i : i + size] for i in range(0, len(text), size)]


async def test_home_assistant_stream_sequence(wy_uri: str) -> None:
    voice = SynthesizeVoice(name="en_US-joe-medium")
    async with client_for(wy_uri) as c:
        t0 = time.perf_counter()
        await c.write_event(SynthesizeStart(voice=voice).event())
        for delta in tokens(LONG_TEXT):
            await c.write_event(SynthesizeChunk(text=delta).event())
        # The compatibility copy of the whole text: must be ignored, not spoken twice.
        await c.write_event(Synthesize(text=LONG_TEXT, voice=voice).event())
        await c.write_event(SynthesizeStop().event())
        r = await read_response(c, streaming=True, t0=t0)
    types = r.types
    assert r.error is None, r.error
    assert types.count("audio-start") == 1 and types[0] == "audio-start"
    assert types[-2:] == ["audio-stop", "synthesize-stopped"], types[-3:]
    assert set(types[1:-2]) == {"audio-chunk"}
    assert all(c.rate == 22050 for c in r.chunks())
    # Spoken once: about as long as the same text one-shot (~12 s), not twice that.
    seconds = len(r.audio()) / 22050
    assert 8 < seconds < 20, seconds


async def test_audio_starts_before_synthesize_stop(wy_uri: str) -> None:
    """The first sentence is spoken while the model is still writing."""
    first_sentence, rest = LONG_TEXT.split(". ", 1)
    async with client_for(wy_uri) as c:
        await c.write_event(SynthesizeStart().event())  # no voice: the default
        for delta in tokens(first_sentence + ". "):
            await c.write_event(SynthesizeChunk(text=delta).event())
        # Nothing more is sent until audio has arrived.
        got = []
        async with asyncio.timeout(30):
            while True:
                ev = await c.read_event()
                assert ev is not None
                got.append(ev.type)
                if AudioChunk.is_type(ev.type):
                    break
        assert got[0] == "audio-start"
        for delta in tokens(rest):
            await c.write_event(SynthesizeChunk(text=delta).event())
        await c.write_event(SynthesizeStop().event())
        r = await read_response(c, streaming=True)
    assert r.error is None, r.error
    assert "audio-start" not in r.types  # one constant rate: a single audio-start
    assert SynthesizeStopped.is_type(r.events[-1].type)


async def test_stream_text_that_arrives_while_a_request_runs_is_kept(wy_uri: str) -> None:
    """A stream started behind a one-shot on the same connection gets all its text."""
    async with client_for(wy_uri) as c:
        await c.write_event(Synthesize(text="First, this.").event())
        await c.write_event(SynthesizeStart().event())
        for delta in tokens("Then this streamed sentence."):
            await c.write_event(SynthesizeChunk(text=delta).event())
        await c.write_event(SynthesizeStop().event())
        one = await read_response(c)
        two = await read_response(c, streaming=True)
    assert one.error is None and two.error is None
    assert one.types[-1] == "audio-stop"
    assert two.types[0] == "audio-start" and two.types[-1] == "synthesize-stopped"
    assert len(two.audio()) / 22050 > 1.0


async def test_empty_stream_is_an_error_and_the_connection_goes_on(wy_uri: str) -> None:
    async with client_for(wy_uri) as c:
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeStop().event())
        r = await read_response(c, streaming=True)
        assert r.error is not None and r.error.code == "empty_text", r.types
        await c.write_event(Synthesize(text="Still here.").event())
        r = await read_response(c)
        assert r.error is None and r.types[-1] == "audio-stop"


async def test_an_eager_stream_speaks_before_the_sentence_ends(wy_uri: str) -> None:
    """``text_start: eager`` in ``synthesize-start`` (ttsd's extension; ``wyoming.text_start``
    sets it for every stream): the first words sound while the first sentence is still being
    written, a word at a time at ~12 words a second."""
    from wyoming.event import Event

    sentence = (
        "The maintenance crew will replace the broken escalator on the north side of the "
        "station before the morning rush begins tomorrow."
    )
    words = [" " + w if k else w for k, w in enumerate(sentence.split(" "))]
    async with client_for(wy_uri) as c:
        await c.write_event(Event("synthesize-start", {"voice": {}, "text_start": "eager"}))
        reading = asyncio.create_task(read_response(c, streaming=True))
        for word in words:
            await c.write_event(SynthesizeChunk(text=word).event())
            await asyncio.sleep(0.08)
        last_word_at = time.perf_counter()
        await c.write_event(SynthesizeStop().event())
        r = await reading
    assert r.error is None, r.error
    # read_response's t0 is 0: first_chunk_s is the clock's reading when it came.
    assert r.first_chunk_s is not None and r.first_chunk_s < last_word_at, "audio came last"
