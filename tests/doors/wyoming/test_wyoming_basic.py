"""describe, one-shot synthesize and voice choice over the real ``wyoming`` client."""

from __future__ import annotations

import itertools

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

from tests.doors.wyoming.wyoming_helpers import LONG_TEXT, SHORT_TEXT, client_for, request

VOICE = "en_US-joe-medium"


async def describe(uri: str) -> Info:
    async with client_for(uri) as c:
        await c.write_event(Describe().event())
        ev = await c.read_event()
    assert ev is not None and Info.is_type(ev.type), ev
    return Info.from_event(ev)


async def test_describe_lists_one_streaming_program_with_every_voice(wy_uri: str) -> None:
    info = await describe(wy_uri)
    assert len(info.tts) == 1
    program = info.tts[0]
    assert program.name == "ttsd" and program.installed
    assert program.supports_synthesize_streaming
    assert program.version and program.attribution.name == "ttsd"
    (voice,) = program.voices
    assert voice.name == VOICE and voice.installed
    assert voice.languages == ["en_US"]
    assert voice.description and VOICE in voice.description
    assert voice.speakers is None  # a single-speaker voice


async def test_one_shot_is_one_start_chunks_as_made_and_one_stop(wy_uri: str) -> None:
    r = await request(wy_uri, Synthesize(text=LONG_TEXT).event())
    types = r.types
    assert types[0] == "audio-start" and types[-1] == "audio-stop", types
    assert set(types[1:-1]) == {"audio-chunk"}
    start = r.start()
    assert (start.rate, start.width, start.channels) == (22050, 2, 1)
    chunks = r.chunks()
    assert all((c.rate, c.width, c.channels) == (22050, 2, 1) for c in chunks)
    # Sub-sentence chunks (dialog mode): the first is a fraction of a second.
    assert len(chunks) > 8
    assert chunks[0].seconds < 0.4
    # Timestamps (ms) are where each chunk starts in the audio.
    stamps = [c.timestamp for c in chunks]
    assert stamps[0] == 0 and stamps == sorted(stamps)
    total_ms = sum(c.seconds for c in chunks) * 1000
    for c, nxt in itertools.pairwise(chunks):
        assert c.timestamp is not None and nxt.timestamp is not None
        assert abs(c.timestamp + c.milliseconds - nxt.timestamp) <= 2
    stop = AudioStop.from_event(r.events[-1])
    assert stop.timestamp is not None and abs(stop.timestamp - total_ms) <= 2
    assert total_ms > 8000
    assert int(abs(r.audio()).max()) > 3000  # speech, not silence


async def test_voice_by_name_language_or_default(wy_uri: str) -> None:
    for voice in (
        SynthesizeVoice(name=VOICE),
        SynthesizeVoice(language="en_US"),
        SynthesizeVoice(language="en"),
        None,
    ):
        r = await request(wy_uri, Synthesize(text=SHORT_TEXT, voice=voice).event())
        assert r.error is None, (voice, r.error)
        assert r.types[-1] == "audio-stop"
        assert AudioStart.from_event(r.events[0]).rate == 22050


async def test_speaker_by_name_or_integer_id(wy_uri: str) -> None:
    # The bundled voice has one speaker: id 0 (as a number or a numeric string) is it.
    for speaker in ("0", 0):
        ev = Synthesize(text=SHORT_TEXT, voice=SynthesizeVoice(name=VOICE)).event()
        ev.data["voice"]["speaker"] = speaker
        r = await request(wy_uri, ev)
        assert r.error is None and r.types[-1] == "audio-stop", (speaker, r.error)
    r = await request(
        wy_uri,
        Synthesize(text=SHORT_TEXT, voice=SynthesizeVoice(name=VOICE, speaker="zed")).event(),
    )
    assert r.error is not None and r.error.code == "bad_request"


async def test_several_requests_on_one_connection_are_answered_in_order(wy_uri: str) -> None:
    async with client_for(wy_uri) as c:
        await c.write_event(Synthesize(text=SHORT_TEXT).event())
        await c.write_event(Synthesize(text="").event())
        await c.write_event(Synthesize(text="Second one.").event())
        seen: list[str] = []
        while seen.count("audio-stop") < 2:
            ev = await c.read_event()
            assert ev is not None
            seen.append(ev.type)
    first_stop = seen.index("audio-stop")
    assert seen[first_stop + 1] == "error"  # the empty one, in its turn
    assert seen[first_stop + 2] == "audio-start"
    assert all(t == "audio-chunk" for t in seen[1:first_stop])


async def test_chunks_arrive_before_the_audio_is_done(wy_uri: str) -> None:
    """The first chunk reaches the client long before the whole text is synthesized."""
    async with client_for(wy_uri) as c:
        import time

        t0 = time.perf_counter()
        await c.write_event(Synthesize(text=LONG_TEXT).event())
        first = None
        while True:
            ev = await c.read_event()
            assert ev is not None
            if AudioChunk.is_type(ev.type) and first is None:
                first = time.perf_counter() - t0
            if AudioStop.is_type(ev.type):
                break
        total = time.perf_counter() - t0
    assert first is not None and first < total / 3, (first, total)
