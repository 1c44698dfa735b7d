"""Text that streams in, on the real daemon: the protocol v1 ops (append, flush, finish,
idle timer, text timeout, cancel, disconnect, errors for unknown / finished / other
connections' streams, spans across appends).  The release rule itself, without a daemon:
tests/text/cuts/test_stream.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.clients.client import AsyncClient, Client, encode
from tests.asr import recognize, wer
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire

# ---------------------------------------------------------------- on the real daemon


def _stream_events(w: Wire, rid: int) -> list[dict[str, Any]]:
    return w.until(rid)


def _spans_tile(text: str, chunks: list[dict[str, Any]]) -> None:
    """Spans are in order, inside the text as sent, and cover every word of it."""
    covered = np.zeros(len(text), dtype=bool)
    last_start = 0
    for ch in chunks:
        a, b = ch["text_span"]
        assert 0 <= a < b <= len(text), (a, b, len(text))
        assert a >= last_start, (a, last_start)
        last_start = a
        covered[a:b] = True
    for i, c in enumerate(text):
        if c.isalnum():
            assert covered[i], f"character {i} ({text[max(0, i - 10) : i + 10]!r}) not spoken"


def test_appends_spans_and_end(daemon: Daemon) -> None:
    pieces = [
        "Good mor",
        "ning. The tr",
        "ain to Bos",
        "ton leaves at 3:",
        "30 pm, ",
        "from platform 9. Please ",
        "have your tick",
        "ets ready.",
    ]
    text = "".join(pieces)
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text_stream": True})
        assert w.recv()["event"] == "start"  # at once, before any text
        for p in pieces:
            w.send({"op": "append", "target": 1, "text": p})
            time.sleep(0.02)
        w.send({"op": "finish", "target": 1})
        evs = _stream_events(w, 1)
    assert evs[-1]["event"] == "end", evs[-1]
    chunks = [e for e in evs if e["event"] == "chunk"]
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    _spans_tile(text, chunks)
    assert sum(c["sentence_end"] for c in chunks) >= 3


def test_first_sentence_speaks_before_finish(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text_stream": True, "text": "Turn left. "})
        assert w.recv()["event"] == "start"
        ev = w.recv(timeout=20)
        assert ev is not None and ev["event"] == "chunk"  # no finish sent yet
        assert ev["text_span"][1] <= len("Turn left.")
        w.send({"op": "append", "target": 1, "text": "Then right."})
        w.send({"op": "finish", "target": 1})
        evs = _stream_events(w, 1)
    assert evs[-1]["event"] == "end"


def test_flush_and_idle_release_unfinished_text(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text_stream": True})
        assert w.recv()["event"] == "start"
        w.send({"op": "append", "target": 1, "text": "no sentence end here", "flush": True})
        ev = w.recv(timeout=20)
        assert ev is not None and ev["event"] == "chunk"
        # idle: "but this waits" is released after text_idle_ms without new text,
        # up to the last word boundary
        w.send({"op": "append", "target": 1, "text": " but this waits for"})
        got = []
        while True:
            ev = w.recv(timeout=20)
            assert ev is not None
            got.append(ev)
            if ev["text_span"][1] >= len("no sentence end here but this waits"):
                break
        w.send({"op": "finish", "target": 1})
        evs = _stream_events(w, 1)
    assert evs[-1]["event"] == "end"


def test_cancel_and_disconnect_mid_stream(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 7, "text_stream": True, "text": "One two three. "})
        assert w.recv()["event"] == "start"
        w.send({"op": "cancel", "id": 8, "target": 7})
        evs = w.until(7)
        assert evs[-1]["event"] == "end" and evs[-1]["cancelled"] is True
        # the stream is closed now: appending is refused, with id null
        w.send({"op": "append", "target": 7, "text": "more"})
        err = w.until(None, ("error",))[-1]
        assert err["code"] == "bad_request" and err["refused"] is True
    # disconnect with an open stream: the daemon drops its work
    w2 = Wire(daemon.socket)
    w2.send({"op": "synthesize", "id": 1, "text_stream": True, "text": "A long text. " * 20})
    assert w2.recv()["event"] == "start"
    w2.close()
    with Client(daemon.socket) as c:
        deadline = time.monotonic() + 20
        while True:
            st = c.stats()
            if not st["streams"] and st["queue_depth"] == 0:
                break
            assert time.monotonic() < deadline, st["streams"]
            time.sleep(0.1)


def test_append_and_finish_to_streams_that_are_not_open(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w, Wire(daemon.socket) as other:
        other.send({"op": "synthesize", "id": 5, "text_stream": True})
        assert other.recv()["event"] == "start"
        # unknown id, another connection's id, a request that is not a text stream
        w.send({"op": "append", "target": 99, "text": "x"})
        w.send({"op": "finish", "target": 5})
        w.send({"op": "synthesize", "id": 3, "text": "Plain request."})
        w.send({"op": "append", "target": 3, "text": "x"})
        errors = []
        end3 = None
        while end3 is None or len(errors) < 3:
            ev = w.recv(timeout=30)
            assert ev is not None
            if ev["event"] == "error":
                errors.append(ev)
            if ev.get("id") == 3 and ev["event"] == "end":
                end3 = ev
        assert all(e["id"] is None and e["refused"] is True for e in errors), errors
        # the other connection's stream was not touched
        other.send({"op": "append", "target": 5, "text": "Still mine."})
        other.send({"op": "finish", "target": 5})
        assert other.until(5)[-1]["event"] == "end"
        # a finished stream refuses more text, and still ends exactly once (in one write:
        # sent apart, a loaded client could be slower than the short stream's end, and
        # the append would then meet no stream at all)
        msgs = [
            {"op": "synthesize", "id": 4, "text_stream": True, "text": "Last one."},
            {"op": "finish", "target": 4},
            {"op": "append", "target": 4, "text": " more"},
        ]
        w.send_raw(b"".join(encode(m) for m in msgs))
        evs = w.until(4, ("end",))  # the refusal carries the id and is not its end
        refusals = [e for e in evs if e["event"] == "error"]
        assert len(refusals) == 1 and refusals[0]["refused"] is True, evs
        assert [e["event"] for e in evs].count("end") == 1


def test_text_too_long_keeps_audio_and_refuses_later_appends(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory({"limits": {"max_text_chars": 60}})
    with Wire(d.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text_stream": True, "text": "Short first. "})
        assert w.recv()["event"] == "start"
        first = w.recv(timeout=20)
        assert first is not None and first["event"] == "chunk"
        w.send({"op": "append", "target": 1, "text": "x " * 40})
        evs = w.until(1)
        assert evs[-1]["event"] == "error" and evs[-1]["code"] == "text_too_long"
        assert "refused" not in evs[-1]
        w.send({"op": "append", "target": 1, "text": "more"})
        err = w.until(None, ("error",))[-1]
        assert err["refused"] is True
        assert w.call({"op": "ping", "id": 2})["event"] == "pong"


def test_text_timeout(daemon_factory: DaemonFactory) -> None:
    d = daemon_factory({"streaming": {"text_timeout_s": 0.5}})
    with Wire(d.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text_stream": True, "text": "Hello"})
        evs = w.until(1)
        assert evs[0]["event"] == "start"
        assert evs[-1]["event"] == "error" and evs[-1]["code"] == "text_timeout"


def test_half_closed_client_gets_its_answers(daemon: Daemon) -> None:
    """EOF on read means "no more requests", not "cancel": answers still come, and an
    open text stream ends with what it has."""
    w = Wire(daemon.socket)
    w.send({"op": "synthesize", "id": 1, "text": "Answer me."})
    w.send({"op": "synthesize", "id": 2, "text_stream": True, "text": "And finish me"})
    w.sock.shutdown(2 - 1)  # SHUT_WR
    ends = {}
    while len(ends) < 2:
        ev = w.recv(timeout=30)
        assert ev is not None, "closed before the answers"
        if ev["event"] in ("end", "error"):
            ends[ev["id"]] = ev
    assert ends[1]["event"] == "end" and ends[2]["event"] == "end"
    assert w.recv(timeout=10) is None  # then the daemon closes
    w.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(min_value=1, max_value=80), min_size=1, max_size=12))
def test_any_split_speaks_every_word(daemon: Daemon, cuts: list[int]) -> None:
    text = "Please turn left at the next corner. Then drive three hundred metres, and stop."
    points = sorted({c for c in cuts if c < len(text)})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    with Client(daemon.socket) as c:
        # No sampling noise: what the recogniser hears depends on the split alone.
        stream = c.text_stream(format="s16le", noise_scale=0.0, noise_w=0.0)
        for p in pieces:
            stream.append(p)
        stream.finish()
        result = stream.collect()
    _spans_tile(text, result.chunks)
    heard = recognize(np.frombuffer(result.audio, dtype="<i2"), result.sample_rate)
    assert wer(text, heard) < 0.5, heard


def test_async_client_text_stream(daemon: Daemon) -> None:
    import asyncio

    async def run() -> int:
        async with await AsyncClient.connect(daemon.socket) as ac:
            stream = await ac.text_stream()
            for token in ("The ", "door ", "is ", "open. ", "Come ", "in."):
                await stream.append(token)
            await stream.flush()
            await stream.finish()
            result = await stream.collect()
            return len(result.audio)

    assert asyncio.run(run()) > 10_000


def test_a_first_piece_over_the_limit_ends_at_once_on_every_door(
    daemon_factory: DaemonFactory,
) -> None:
    """Issue 32, item 2: a text stream whose first piece (or the appends in the same
    write) is over max_text_chars ends with text_too_long at once.  It used to get
    ``start`` and then nothing, stayed live, and a dozen of them made admission refuse
    every real-time request on every door (v1 busy, HTTP 429, Wyoming busy)."""
    import asyncio

    import aiohttp
    from wyoming.event import Event

    from tests.doors.http.conftest import start_http
    from tests.doors.wyoming.wyoming_helpers import request, wyoming_uri

    d = start_http(
        daemon_factory,
        limits={"max_text_chars": 100},
        wyoming={"uri": "tcp://127.0.0.1:0", "allowed_networks": ["127.0.0.1/32"]},
    )
    over = "word " * 30
    with Wire(d.daemon.socket, timeout=5) as w:
        for i in range(12):
            if i % 2:
                w.send({"op": "synthesize", "id": i, "text_stream": True, "text": over})
            else:  # the appends in the same write as the request
                w.send_raw(
                    msgpack.packb({"op": "synthesize", "id": i, "text_stream": True, "text": "Hi "})
                    + msgpack.packb({"op": "append", "target": i, "text": over})
                )
        for i in range(12):
            evs = w.until(i)  # (a TimeoutError after 5 s: the old hang)
            assert [e["event"] for e in evs] == ["start", "error"], evs
            assert evs[-1]["code"] == "text_too_long"
        # Nothing of them is left live: every door admits real-time requests.
        assert w.call({"op": "stats", "id": 99})["streams"] == []
        w.send({"op": "synthesize", "id": 50, "text": "Still served."})
        assert w.until(50)[-1]["event"] == "end"

    async def http_speech() -> int:
        async with aiohttp.ClientSession() as s:
            body = {"input": "Still served.", "response_format": "pcm"}
            async with s.post(d.v1 + "/audio/speech", json=body) as r:
                await r.read()
                return r.status

    assert asyncio.run(http_speech()) == 200
    uri = wyoming_uri(d.daemon)
    streamed = asyncio.run(
        request(
            uri,
            Event("synthesize-start", {}),
            Event("synthesize-chunk", {"text": over}),
            Event("synthesize-stop", {}),
            streaming=True,
        )
    )
    assert streamed.error is not None and streamed.error.code == "text_too_long", streamed.types
    done = asyncio.run(request(uri, Event("synthesize", {"text": "Still served."})))
    assert done.error is None and done.types[-1] == "audio-stop", done.types


# ---------------------------------------------------------------- the feed, without a daemon


def test_an_eager_feed_drafts_only_when_the_job_would_speak_from_a_draft() -> None:
    """A draft is the frontend run again over the unreleased text: made on every word only
    while the job asks (``ClauseQueue.want_draft``), and at once when it starts asking."""
    from appliance.core.pipeline.clauses import ClauseQueue
    from appliance.core.textstream import TextFeed
    from appliance.errors import ServiceError
    from appliance.text.cuts.stream import SegmentRule
    from appliance.text.frontend import Clause, FrontendLimits, prepare

    made: list[str] = []

    async def prep(text: str, first: bool) -> list[Clause]:
        made.append(text)
        return prepare(text, "en_US", FrontendLimits(2000, 400))

    async def until(done: Callable[[], bool]) -> None:
        for _ in range(1000):
            if done():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("not within 5 s")

    async def run() -> None:
        errors: list[ServiceError] = []
        queue = ClauseQueue(closed=False)
        feed = TextFeed(
            queue, prep, SegmentRule(40, 400, 0), 10_000, 30.0, errors.append, eager=True
        )
        words = lambda: queue.draft.words if queue.draft is not None else 0  # noqa: E731
        try:
            feed.append("The train to Boston")
            await until(lambda: words() == 4)
            queue.want_draft(False)
            for word in (" leaves", " at", " noon"):
                feed.append(word)
                await asyncio.sleep(0.02)
            assert made == ["The train to Boston"] and words() == 4
            queue.want_draft(True)  # the listener runs short: the text as it is now
            await until(lambda: words() == 7)
            assert made[-1] == "The train to Boston leaves at noon"
            feed.append(" today")
            await until(lambda: words() == 8)
            assert not errors
        finally:
            feed.close()

    asyncio.run(run())
