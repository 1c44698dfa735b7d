"""Every bad input: an ``error`` event and the connection goes on, or — for bytes that are
not a Wyoming event, or declared lengths over the limits — that connection alone is closed,
without the declared length being read.  Everyone else keeps being served."""

from __future__ import annotations

import asyncio
import json

import pytest
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStop, SynthesizeVoice

from tests.conftest import Daemon, DaemonFactory
from tests.core.scheduling.sched_helpers import stats
from tests.doors.wyoming.wyoming_helpers import (
    SHORT_TEXT,
    client_for,
    parse_events,
    raw_exchange,
    read_response,
    request,
    wyoming_uri,
)

HAN = "这是一个完全用中文写的句子，英语声音不会说。"


async def still_usable(c: object) -> None:
    await c.write_event(Describe().event())  # type: ignore[attr-defined]
    ev = await c.read_event()  # type: ignore[attr-defined]
    assert ev is not None and Info.is_type(ev.type), ev


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (Synthesize(text="", voice=None).event(), "empty_text"),
        (Synthesize(text="   ...  ").event(), "empty_text"),
        (Synthesize(text="word " * 500).event(), "text_too_long"),  # the limit is 2000 here
        (
            Synthesize(text="这是一个完全用中文写的句子，英语声音不会说。").event(),
            "unsupported_text",
        ),
        (
            Synthesize(text="Hi.", voice=SynthesizeVoice(name="no-such-voice")).event(),
            "unknown_voice",
        ),
        (Synthesize(text="Hi.", voice=SynthesizeVoice(language="xx_YY")).event(), "unknown_voice"),
        (Event("synthesize", {"text": 42}), "bad_request"),
        (Event("synthesize", {"text": "Hi.", "voice": "joe"}), "bad_request"),
        (Event("synthesize", {"text": "Hi.", "voice": {"name": 5}}), "bad_request"),
        (
            Event(
                "synthesize",
                {"text": "Hi.", "voice": {"name": "en_US-joe-medium", "speaker": True}},
            ),
            "bad_request",
        ),
        (Event("synthesize", {"text": "Hi.", "text_format": 3}), "bad_request"),
        (SynthesizeChunk(text="orphan").event(), "bad_request"),
        (SynthesizeStop().event(), "bad_request"),
    ],
)
async def test_bad_request_gets_its_error_and_the_connection_goes_on(
    wy_uri: str, event: Event, code: str
) -> None:
    async with client_for(wy_uri) as c:
        await c.write_event(event)
        r = await read_response(c)
        assert r.error is not None, r.types
        assert r.error.code == code, r.error
        assert r.error.text
        await still_usable(c)
        await c.write_event(Synthesize(text="Still fine.").event())
        ok = await read_response(c)
        assert ok.error is None and ok.types[-1] == "audio-stop"


async def test_stream_growing_past_the_limit_is_text_too_long(wy_uri: str) -> None:
    from wyoming.tts import SynthesizeStart

    async with client_for(wy_uri) as c:
        await c.write_event(SynthesizeStart().event())
        for _ in range(30):
            await c.write_event(SynthesizeChunk(text="many words " * 10).event())
        await c.write_event(SynthesizeStop().event())
        r = await read_response(c, streaming=True)
        assert r.error is not None and r.error.code == "text_too_long", r.types
        await still_usable(c)


async def test_unknown_events_are_ignored(wy_uri: str) -> None:
    async with client_for(wy_uri) as c:
        for t in ("no-such-event", "audio-chunk", "transcribe", "run-pipeline"):
            await c.write_event(Event(t, {"x": 1}, payload=b"\x00\x01"))
        await still_usable(c)


def header(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"x" * (70 * 1024) + b"\n", "frame_too_large"),  # header line over 64 KiB
        (b"x" * (200 * 1024), "frame_too_large"),  # and no newline at all
        (header({"type": "synthesize", "data_length": 10**12}), "frame_too_large"),
        (header({"type": "synthesize", "payload_length": 10**15}), "frame_too_large"),
        (header({"type": "synthesize", "data_length": 70 * 1024}), "frame_too_large"),
        (header({"type": "synthesize", "data_length": "12"}), "bad_request"),
        (header({"type": "synthesize", "data_length": 1.5}), "bad_request"),
        (b"this is not json\n", "bad_request"),
        (b"\xff\xfe\x00garbage\n", "bad_request"),
        (header([1, 2, 3]), "bad_request"),
        (header({"data": {"text": "no type"}}), "bad_request"),
        (header({"type": 7}), "bad_request"),
        (header({"type": "synthesize", "data": [1]}), "bad_request"),
        (header({"type": "synthesize", "data_length": 5}) + b"[1,2]", "bad_request"),
        (header({"type": "synthesize", "data_length": 3}) + b"{{{", "bad_request"),
        (b"[" * 60000 + b"\n", "bad_request"),  # nesting deep enough to recurse
    ],
)
async def test_not_an_event_closes_that_connection_only(
    wy_uri: str, wy_daemon: Daemon, data: bytes, code: str
) -> None:
    got, closed = await raw_exchange(wy_uri, data)
    assert closed, got[:200]
    events = parse_events(got)
    assert [e["type"] for e in events] == ["error"], events
    assert events[0]["data"]["code"] == code, events
    # Everyone else is still served; the daemon did not allocate the declared length.
    r = await request(wy_uri, Synthesize(text=SHORT_TEXT).event())
    assert r.error is None and r.types[-1] == "audio-stop"
    assert wy_daemon.alive()
    st = await stats(wy_daemon)
    assert st.get("frontends", {}).get("wyoming") is not None


async def test_declared_length_is_not_buffered(wy_uri: str, wy_daemon: Daemon) -> None:
    """A huge data_length followed by a stream of bytes: closed at once, memory flat."""
    import psutil

    rss0 = psutil.Process(wy_daemon.proc.pid).memory_info().rss
    data = header({"type": "synthesize", "data_length": 500 * 1024 * 1024}) + b"a" * (8 << 20)
    got, closed = await raw_exchange(wy_uri, data, timeout=10)
    assert closed
    assert parse_events(got)[0]["data"]["code"] == "frame_too_large"
    rss1 = psutil.Process(wy_daemon.proc.pid).memory_info().rss
    assert rss1 - rss0 < 64 << 20, (rss0, rss1)


async def test_an_event_left_unfinished_is_closed_after_the_frame_timeout(wy_uri: str) -> None:
    # frame_timeout_s is 1 s in this daemon's config; the idle timeout is minutes.
    got, closed = await raw_exchange(wy_uri, b'{"type": "descr', timeout=8)
    assert closed
    (event,) = parse_events(got)
    assert event["data"]["code"] == "bad_request" and "incomplete" in event["data"]["text"]
    # A header whose declared data never comes is unfinished too.
    got, closed = await raw_exchange(wy_uri, header({"type": "x", "data_length": 50}), timeout=8)
    assert closed and parse_events(got)[0]["data"]["code"] == "bad_request"


FAULT = "FAULT-INJECTED"
"""Text with this in it makes the daemon's frontend raise (tests/fakes/daemon.py)."""


@pytest.fixture(scope="module")
def wy_fault_daemon(daemon_factory: DaemonFactory) -> Daemon:
    return daemon_factory(
        {"wyoming": {"uri": "tcp://127.0.0.1:0", "allowed_networks": ["127.0.0.1/32"]}},
        seams=["--frontend-fault", FAULT],
    )


@pytest.mark.parametrize(
    ("event", "code"),
    [
        # "²".isdigit() is true and int("²") raises; so does int() of 4 301 digits.
        (Event("synthesize", {"text": "Hi.", "voice": {"speaker": "²"}}), "bad_request"),
        (Event("synthesize", {"text": "Hi.", "voice": {"speaker": "1" * 4301}}), "bad_request"),
        (Event("synthesize", {"text": "Hi.", "voice": {"speaker": 10**30}}), "bad_request"),
        # any other exception on a request's path (a bug's stand-in)
        (Event("synthesize", {"text": f"Hello {FAULT}."}), "internal"),
    ],
    ids=["superscript-two", "4301-digits", "huge-int", "frontend-raises"],
)
async def test_a_request_that_raises_is_answered_and_the_worker_goes_on(
    wy_fault_daemon: Daemon, event: Event, code: str
) -> None:
    """Issue 32, item 4: the connection's worker used to die silently: no answer to this
    request nor to the next on the connection, and nothing logged."""
    uri = wyoming_uri(wy_fault_daemon)
    async with asyncio.timeout(20), client_for(uri) as c:
        await c.write_event(event)
        r = await read_response(c)
        assert r.error is not None and r.error.code == code, r.types
        await c.write_event(Synthesize(text="Still fine.").event())
        ok = await read_response(c)
        assert ok.error is None and ok.types[-1] == "audio-stop", ok.types
    if code == "internal":
        log = wy_fault_daemon.log()
        assert "ends with internal" in log and "RuntimeError" in log
