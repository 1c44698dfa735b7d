"""The ElevenLabs WebSocket's protocol without a socket: messages in, messages out, on the
real service core and the bundled voice."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.doors.elevenlabs.alignment import Aligner
from appliance.doors.elevenlabs.contexts import Contexts
from appliance.doors.elevenlabs.messages import BadMessage, ClientMessage, Query
from appliance.doors.frame.ending import Done, Ending, Failed, Report
from appliance.doors.frame.requests import Request, Requests
from appliance.errors import ErrorCode
from appliance.ops.config import Config, ElevenLabsConfig, LimitsConfig, VoicesConfig
from appliance.speech import Word
from tests.conftest import roomy_scheduler

VOICE = "en_US-joe-medium"


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    # Two contexts speak at once here: admission must not judge them by what else the box runs.
    rt = Runtime.load(
        Config(voices=VoicesConfig(cache_dir=str(voice_cache)), scheduler=roomy_scheduler())
    )
    yield rt
    rt.close()


# ---------------------------------------------------------------- messages


def test_query_takes_elevenlabs_params_and_caps_the_inactivity_timeout() -> None:
    q = Query.parse(
        f"{VOICE}:0",
        {"output_format": "ulaw_8000", "inactivity_timeout": "900", "model_id": "eleven_flash"},
        180.0,
    )
    assert (q.voice, q.speaker, q.sample_format, q.rate) == (VOICE, 0, "mulaw", 8000)
    assert q.inactivity_s == 180.0
    assert Query.parse(VOICE, {"output_format": "pcm_22050"}, 180.0).inactivity_s == 20.0
    for bad in ({}, {"output_format": "mp3_44100_128"}, {"output_format": "pcm_24000",
                "inactivity_timeout": "nan"}, {"output_format": "pcm_24000",
                "sync_alignment": "maybe"}):  # fmt: skip
        with pytest.raises(BadMessage):
            Query.parse(VOICE, bad, 180.0)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{", "not valid JSON"),
        ("[1]", "JSON object"),
        ('{"text": "hi", "colour": 1}', "unknown field 'colour'"),
        ('{"text": 5}', "'text' must be a string"),
        ('{"flush": "yes"}', "'flush'"),
        ('{"context_id": ""}', "'context_id'"),
        ('{"voice_settings": {"speed": 9}}', "'voice_settings.speed'"),
        ("[" * 100000, "not valid JSON"),
    ],
)
def test_a_bad_message_is_refused_with_what_was_wrong(raw: str, says: str) -> None:
    with pytest.raises(BadMessage) as err:
        ClientMessage.parse(raw)
    assert says in err.value.message


def test_elevenlabs_fields_are_accepted_and_speed_is_mapped() -> None:
    msg = ClientMessage.parse(
        json.dumps(
            {
                "text": " ",
                "voice_settings": {"stability": 0.5, "similarity_boost": 0.8, "speed": 1.1},
                "generation_config": {"chunk_length_schedule": [50]},
                "xi_api_key": "k",
                "try_trigger_generation": True,
                "context_id": "a",
            }
        )
    )
    assert (msg.text, msg.context_id, msg.speed) == (" ", "a", 1.1)


def test_alignment_spreads_each_word_over_its_characters_and_blocks_tile() -> None:
    text = " Hello big world."
    al = Aligner()
    al.add(text, [Word((1, 6), 100.0, 250.0)])
    first = al.block(330.0)  # the audio sent so far ends inside "Hello"'s last letter
    assert first is not None
    assert "".join(first["chars"]) == " Hello"
    assert first["charStartTimesMs"] == [0, 100, 150, 200, 250, 300]
    assert sum(first["charDurationsMs"]) == 350  # the block ends where "Hello" ends
    al.add(text, [Word((7, 10), 400.0, 90.0), Word((11, 16), 500.0, 100.0)])
    second = al.block(520.0)  # "world" has begun, only its first letter within the audio
    assert second is not None
    assert "".join(second["chars"]) == " big w"
    # Relative to the block's start (350 ms): the space takes the pause before "big".
    assert second["charStartTimesMs"][:2] == [0, 50]
    rest = al.block()
    assert rest is not None and "".join(rest["chars"]) == "orld"
    assert rest["charStartTimesMs"][0] == 0  # it starts where the last block ended
    assert al.block() is None


# ---------------------------------------------------------------- sessions


class Client:
    """A session and what it sent, decoded."""

    def __init__(
        self,
        service: Service,
        multi: bool,
        fmt: str = "pcm_16000",
        params: dict[str, str] | None = None,
        **cfg: Any,
    ):
        self.sent: list[dict[str, Any]] = []
        query = Query.parse(VOICE, {"output_format": fmt, **(params or {})}, 180.0)
        el = ElevenLabsConfig(**cfg)
        report = Report(service.record_error, logging.getLogger("test"), "elevenlabs")
        requests = Requests(self._end, report, "test", lambda: None)
        self.session = Contexts(
            service, query, multi, self._send, requests, lambda: el, LimitsConfig
        )
        self.gate = asyncio.Event()
        """Closed: the "socket" writes nothing yet; a message waits, then goes only if its
        ``live`` still holds (the wire asks ``live`` as it writes)."""
        self.gate.set()
        self.waiting = 0
        self._lock = asyncio.Lock()

    async def _send(self, msg: dict[str, Any], live: Any = None) -> bool:
        self.waiting += 1
        async with self._lock:
            await self.gate.wait()
            self.waiting -= 1
            if live is not None and not live():
                return False
            self.sent.append(msg)
            return True

    async def _end(self, req: Request, ending: Ending[Any]) -> None:
        """How the frame would end a context: a body that raised (a bug) is its error."""
        assert isinstance(ending, Done | Failed), ending
        if isinstance(ending, Failed):
            self.sent.append({"error": ending.error.code, "key": req.key})

    async def say(self, **msg: Any) -> None:
        await self.session.receive(json.dumps(msg))

    async def settle(self, timeout: float = 60.0) -> None:
        async with asyncio.timeout(timeout):
            while self.session.running:
                await asyncio.sleep(0.01)

    def audio(self, ctx: str | None = None) -> bytes:
        return b"".join(
            base64.b64decode(m["audio"])
            for m in self.sent
            if m.get("audio") and m.get("contextId") == ctx
        )

    def finals(self, ctx: str | None = None) -> int:
        return sum(1 for m in self.sent if m.get("isFinal") is True and m.get("contextId") == ctx)

    def chars(self, ctx: str | None = None) -> str:
        return "".join(
            "".join(m["alignment"]["chars"])
            for m in self.sent
            if m.get("alignment") and m.get("contextId") == ctx
        )


def test_one_stream_speaks_its_text_with_alignment_then_one_final(runtime: Runtime) -> None:
    async def scenario() -> Client:
        c = Client(Service(runtime), multi=False)
        await c.say(text=" ", voice_settings={"speed": 1.0})
        for token in ("Hello ", "there, ", "how are ", "you today? "):
            await c.say(text=token)
        await c.say(text="")  # end of stream
        await c.settle()
        return c

    c = asyncio.run(scenario())
    assert c.session.ending and not c.session.running
    assert c.finals() == 1 and c.sent[-1] == {"isFinal": True}
    assert "contextId" not in c.sent[0]
    pcm = c.audio()
    assert len(pcm) > 16000 * 2 * 0.8  # ~1.5 s of 16 kHz s16le
    assert c.chars().strip() == "Hello there, how are you today?"


def test_close_context_mid_sentence_stops_its_audio_and_another_goes_on(
    runtime: Runtime,
) -> None:
    long = "This sentence keeps going for quite a while so that there is audio to cut, "

    async def scenario() -> Client:
        c = Client(Service(runtime), multi=True)
        await c.say(text=" ", context_id="a")
        await c.say(text=long * 4 + "and then", context_id="a", flush=True)
        await c.say(text=" more words without an end", context_id="a")
        async with asyncio.timeout(30):
            while not c.audio("a"):
                await asyncio.sleep(0.01)
        await c.say(context_id="a", close_context=True)
        await c.say(text=" ", context_id="b")
        await c.say(text="Hello again.", context_id="b", flush=True)
        await c.say(context_id="b", close_context=True)
        await c.settle()
        return c

    c = asyncio.run(scenario())
    assert c.finals("a") == 1 and c.finals("b") == 1, [m for m in c.sent if not m.get("audio")]
    # "a" was cut: far less than its ~25 s of text; "b" was spoken whole (flushed, then closed).
    assert len(c.audio("a")) < 16000 * 2 * 15
    assert len(c.audio("b")) > 16000 * 2 * 0.5
    assert c.chars("b").strip() == "Hello again."
    last_a = max(i for i, m in enumerate(c.sent) if m.get("contextId") == "a")
    assert c.sent[last_a]["isFinal"] is True and "sentTextSpan" in c.sent[last_a]
    # "b" ended as written (close_context after a flush): no interruption to report.
    assert c.sent[-1] == {"isFinal": True, "contextId": "b"}


def test_an_interrupted_context_sends_nothing_after_the_cancel_and_says_how_far_it_got(
    runtime: Runtime,
) -> None:
    """Barge-in: audio that was waiting to go out when ``close_context`` was read is
    dropped, and the ``isFinal`` says how far in the text the audio sent reaches."""
    text = " " + "This sentence keeps going for quite a while so that there is audio to cut, " * 4

    async def scenario() -> tuple[Client, int]:
        c = Client(Service(runtime), multi=True)
        await c.say(text=text, context_id="a", flush=True)
        await c.say(text="and then", context_id="a")  # mid-sentence: a close interrupts
        async with asyncio.timeout(30):
            while not c.chars("a").strip():  # a word's sound has gone out
                await asyncio.sleep(0.01)
            c.gate.clear()  # the socket is busy: the next audio message waits
            while not c.waiting:
                await asyncio.sleep(0.005)
        cancelled_at = len(c.sent)
        await c.say(context_id="a", close_context=True)
        c.gate.set()
        await c.settle()
        return c, cancelled_at

    c, cancelled_at = asyncio.run(scenario())
    after = c.sent[cancelled_at:]
    assert after == [
        {"isFinal": True, "contextId": "a", "sentTextSpan": after[0].get("sentTextSpan")}
    ]
    lo, hi = after[0]["sentTextSpan"]
    # To the end of the last word whose sound started in the audio sent: the alignment sent
    # reaches into that word (its first letter at least), and the span ends where it ends.
    aligned = c.chars("a")
    assert text.startswith(aligned) and lo <= len(aligned) <= hi < len(text)
    assert text[hi - 1].isalpha() and not text[hi].isalpha(), (hi, text[hi - 5 : hi + 5])
    assert " " not in text[len(aligned) : hi], (aligned, hi)


def test_visemes_come_only_when_the_connection_asks_and_tile_the_audio(runtime: Runtime) -> None:
    async def scenario(params: dict[str, str]) -> Client:
        c = Client(Service(runtime), multi=False, params=params)
        await c.say(text=" ")
        await c.say(text="Hello there, how are you today? ")
        await c.say(text="")
        await c.settle()
        return c

    plain = asyncio.run(scenario({}))
    asked = asyncio.run(scenario({"visemes": "true"}))
    assert plain.audio() and not any("visemes" in m for m in plain.sent)
    got = [m["visemes"] for m in asked.sent if "visemes" in m]
    ids = [i for v in got for i in v["viseme"]]
    offsets = [o for v in got for o in v["offset_ms"]]
    durations = [d for v in got for d in v["duration_ms"]]
    assert set(ids) <= set(range(15)) and len(set(ids)) > 5, ids
    # From the context's audio start, end to end, as long as the audio (the 16 kHz
    # resampler holds back a few ms of it until the end).
    assert offsets[0] == 0.0
    for a, d, b in zip(offsets, durations, offsets[1:], strict=False):
        assert abs(a + d - b) < 0.01, (a, d, b)
    audio_ms = len(asked.audio()) / 2 / 16000 * 1000
    assert abs(offsets[-1] + durations[-1] - audio_ms) < 5.0, (offsets[-1], audio_ms)


def test_refusals_close_the_socket_with_the_documented_error(runtime: Runtime) -> None:
    async def scenario() -> tuple[Client, Client, Client]:
        service = Service(runtime)
        many = Client(service, multi=True, max_contexts=1)
        for i in range(5):
            await many.say(text=" ", context_id=f"c{i}")
            if many.session.closing:
                break
        flood = Client(service, multi=True, max_messages_per_s=10)
        for _ in range(100):
            await flood.say(text="")
            if flood.session.closing:
                break
        bad = Client(service, multi=False)
        await bad.session.receive(b"\xff not json")
        for c in (many, flood, bad):
            c.session.running.cancel_all("disconnect")  # as the wire does after a refusal
            await c.settle()
        return many, flood, bad

    many, flood, bad = asyncio.run(scenario())
    assert many.session.closing == (1008, ErrorCode.TOO_MANY_REQUESTS), many.sent
    assert many.finals("c0") == 1  # the open one still ends, once
    assert flood.session.closing == (1008, ErrorCode.TOO_MANY_REQUESTS)
    assert len(flood.sent) == 1 and "messages a second" in flood.sent[0]["message"]
    assert bad.sent == [
        {"message": "the message is not valid JSON", "error": "bad_request", "code": 1008}
    ]
