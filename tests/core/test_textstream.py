"""Text that streams in: the release rule (table-driven) and the protocol v1 ops on the
real daemon (append, flush, finish, idle timer, text timeout, cancel, disconnect,
errors for unknown / finished / other connections' streams, spans across appends)."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.clients.client import AsyncClient, Client
from appliance.text.cuts import stream as textstream
from appliance.text.cuts.stream import SegmentRule, release_point
from tests.asr import recognize, wer
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire

RULE = SegmentRule(first_chars=40, max_chars=250, idle_ms=300)


@pytest.mark.parametrize(
    ("pending", "first", "released"),
    [
        # a sentence end followed by whitespace: released without the next sentence
        ("Hello there. How", True, "Hello there."),
        ("Hello there. ", False, "Hello there."),
        ("Wow! Really? And", False, "Wow! Really?"),
        # a sentence end nothing can undo is released as it arrives (issue 28) ...
        ("Hello there.", True, "Hello there."),
        ("Wow!", False, "Wow!"),
        ("Really?", True, "Really?"),
        ('He said "Hi."', True, 'He said "Hi."'),
        ("Is it (really?)", True, "Is it (really?)"),
        # ... an ambiguous one waits for the whitespace (it might be "3.50", "Dr. Smith")
        ("It costs 3.", True, ""),
        ("Ask Dr.", True, ""),
        ("Made in the U.S.", True, ""),
        ("Fruit, e.g.", True, ""),
        ("By J.", True, ""),
        ("Apples, pears, etc.", True, ""),
        ("Wait..", True, ""),
        ("Wait...", True, ""),
        ("See example.", True, "See example."),
        ("Open https://x.org/a?", True, ""),
        ("It costs 3.50 now. Then", True, "It costs 3.50 now."),
        # abbreviations, times, money are never cut
        ("Dr. Smith is", True, ""),
        ("Call Dr. Smith. Now", True, "Call Dr. Smith."),
        ("e.g. this one", True, ""),
        ("We talked about apples, pears, etc. and", False, ""),
        ("At 3:30 pm we go. Later", True, "At 3:30 pm we go."),
        ("That is $3.50 for it", True, ""),
        ("Mr. and Mrs. Jones", True, ""),
        # the first segment: a clause mark once it holds ~40 characters
        (
            "The quick brown fox jumps over the lazy dog, and then",
            True,
            "The quick brown fox jumps over the lazy dog,",
        ),
        ("The quick brown fox jumps over the lazy dog, and then", False, ""),
        ("Hi, there you go", True, ""),
        ("A first part of a long sentence — and more", True, ""),
        (
            "A first part of a fairly long sentence here — and more",
            True,
            "A first part of a fairly long sentence here —",
        ),
        ("Numbers like 1,234,567 stay whole in the first segment", True, ""),
        # a long first sentence without a clause mark waits for its end: never a bare space
        ("The committee met on a cold and windy morning to review the proposal for", True, ""),
        (
            "The committee met on a cold and windy morning to review the proposal for",
            False,
            "",
        ),
    ],
)
def test_release_point(pending: str, first: bool, released: str) -> None:
    n = release_point(pending, RULE, first=first)
    assert pending[:n] == released


def test_release_point_idle_flush_and_cap() -> None:
    # idle: up to the last clause mark, else the last word boundary (a word being typed waits)
    assert release_point("some words her", RULE, first=False, idle=True) == len("some words")
    assert release_point("some, words her", RULE, first=False, idle=True) == len("some,")
    assert release_point("oneword", RULE, first=False, idle=True) == 0
    # the listener running dry: a clause mark, never a bare space
    assert release_point("some, words her", RULE, first=False, low=True) == len("some,")
    assert release_point("some words her", RULE, first=False, low=True) == 0
    # flush: everything
    assert release_point("some words her", RULE, first=False, flush=True) == 14
    # hard cap: cut as the frontend cuts a sentence that long (a comma before a space)
    text = "word " * 60
    n = release_point(text, RULE, first=False)
    assert 0 < n <= RULE.max_chars and text[n] == " "
    assert release_point("x" * 300, RULE, first=False) == RULE.max_chars
    commas = "word " * 10 + "and, " + "word " * 50
    assert commas[: release_point(commas, RULE, first=False)].endswith("and,")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text", ["." * 19_999 + "a", "word " * 4_000, "Dr. " * 5_000, "a. " * 6_666]
)
def test_a_long_append_is_released_in_linear_time(text: str) -> None:
    """A text feed releases one big append piece by piece, asking about what is left each
    time, on the event loop: the dots took 111 s, the words 0.7 s."""
    t0 = time.perf_counter()
    spoken, first = 0, True
    while spoken < len(text):
        n = release_point(text[spoken:], RULE, first=first)
        if n <= 0:
            break
        spoken, first = spoken + n, False
    assert time.perf_counter() - t0 < 0.5
    assert spoken >= len(text) - RULE.max_chars


_PIECES = [
    "Hello",
    "there.",
    "Dr.",
    "Smith",
    "e.g.",
    "3.50",
    "etc.",
    "The",
    "J.",
    "R.",
    "Wait...",
    "what?",
    "No!",
    '"Hi."',
    "(yes.)",
    "St.",
    "pm.",
    "…",
    "。",
    "😀",
    "\n",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=200).map(" ".join),
    st.lists(st.integers(1, 400), min_size=1, max_size=30),
)
def test_sentence_cuts_do_not_depend_on_what_was_asked_before(text: str, steps: list[int]) -> None:
    """The cuts of a text are remembered for what is left after a release and for appends;
    each answer is the one a fresh scan gives."""
    spoken, first, end = 0, True, 0
    for step in steps:
        end = min(len(text), end + step)
        while spoken < end:
            pending = text[spoken:end]
            n = release_point(pending, RULE, first=first)
            remembered = textstream._sentence_cut(pending)
            textstream._recent = ()
            assert remembered == textstream._sentence_cut(pending)
            if n <= 0:
                break
            spoken, first = spoken + n, False


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
        # a finished stream refuses more text, and still ends exactly once
        w.send({"op": "synthesize", "id": 4, "text_stream": True, "text": "Last one."})
        w.send({"op": "finish", "target": 4})
        w.send({"op": "append", "target": 4, "text": " more"})
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


@pytest.mark.parametrize(
    ("pending", "markdown", "drafted"),
    [
        ("The train", False, True),  # a word to say, a word ahead
        ("The", False, False),
        ("  The  ", False, False),
        ("word " * 100, False, False),  # longer than a segment may be
        ("Sure, here is **the plan", True, True),
        ("| Day | Rain", True, False),  # a table row is released whole
        ("```python\nprint", True, False),
        ("1. Pasta with\ntomatoes", True, False),  # a second line: not a paragraph's first
    ],
)
def test_what_an_eager_stream_drafts(pending: str, markdown: bool, drafted: bool) -> None:
    assert textstream.draftable(pending, RULE, markdown) is drafted


@pytest.mark.parametrize(
    ("pending", "markdown", "cut"),
    [
        ("Well, the train to Boston leaves", False, len("Well, the train to Boston")),
        ("Well", False, 0),
        ("See [the docs for", True, 0),  # inside a link
        ("See the **docs** for", True, len("See the **docs**")),
    ],
)
def test_an_eager_stream_idles_to_its_last_word_boundary(
    pending: str, markdown: bool, cut: int
) -> None:
    """Its words up to the last one may have been said: the idle rule releases them all (a
    clause mark before them would have the job say them twice)."""
    assert textstream.word_cut(pending, markdown) == cut
