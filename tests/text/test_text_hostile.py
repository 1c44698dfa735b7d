"""Hostile text through the real daemon (issue 32, items 3, 4 and 9; issue 42, items 11 and
12): punctuation runs, many short sentences and Markdown runs are prepared in linear time
while everyone else keeps being answered, SSML numbers that overflow get their documented
answer instead of silence, and a request's pauses stop at their cap."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from appliance.clients.client import Client
from appliance.text.ssml import MAX_TOTAL_BREAK_MS
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire

DOTS = "." * 19_999 + "a"  # within max_text_chars (20 000): 8 s in one regex call before
SENTENCES = "a. " * 6_666
NUMBERS = "1% " * 6_666


class PingProbe:
    """Pings the daemon every 10 ms on its own connection and keeps the round trips."""

    def __init__(self, socket_path: str) -> None:
        self._wire = Wire(socket_path, timeout=60)
        self._stop = threading.Event()
        self.rtts_ms: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rid = 0
        while not self._stop.is_set():
            rid += 1
            t0 = time.perf_counter()
            assert self._wire.call({"op": "ping", "id": rid})["event"] == "pong"
            self.rtts_ms.append((time.perf_counter() - t0) * 1000.0)
            time.sleep(0.01)

    def __enter__(self) -> PingProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self._wire.close()

    def p99(self) -> float:
        ordered = sorted(self.rtts_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _first_answer(w: Wire, rid: int) -> list[dict[str, Any]]:
    """Events of ``rid`` up to its first chunk or its end; the rest is cancelled."""
    got: list[dict[str, Any]] = []
    while True:
        ev = w.recv(timeout=60)
        assert ev is not None
        if ev.get("id") != rid:
            continue
        got.append(ev)
        if ev["event"] == "chunk":
            w.send({"op": "cancel", "id": rid + 1000, "target": rid})
            w.until(rid)
            return got
        if ev["event"] in ("end", "error", "phonemes"):
            return got


@pytest.mark.timeout(240)
def test_hostile_text_is_prepared_while_pings_are_answered(daemon: Daemon) -> None:
    requests: list[dict[str, Any]] = [
        {"op": "synthesize", "text": DOTS},
        {"op": "synthesize", "text": SENTENCES},
        {"op": "synthesize", "text": NUMBERS},
        {"op": "phonemes", "text": DOTS},
        {"op": "synthesize", "text_format": "ssml", "text": f"<speak>{DOTS[-19_900:]}</speak>"},
        {"op": "synthesize", "text_stream": True, "text": DOTS},
    ]
    with Wire(daemon.socket, timeout=60) as w, PingProbe(daemon.socket) as probe:
        time.sleep(0.2)
        for rid, req in enumerate(requests, 1):
            t0 = time.perf_counter()
            w.send({**req, "id": rid})
            if req.get("text_stream"):
                w.send({"op": "finish", "target": rid})
            evs = _first_answer(w, rid)
            took = time.perf_counter() - t0
            assert evs[-1]["event"] in ("chunk", "end", "phonemes", "error"), evs[-1]
            if evs[-1]["event"] == "error":
                assert evs[-1]["code"] == "empty_text", evs[-1]
            assert took < 20, (req["text"][:20], took)
        time.sleep(0.2)
    # The loop never starved: before, one ping waited 8 s behind the splitter's regex.
    assert len(probe.rtts_ms) > 20
    assert probe.p99() < 250, sorted(probe.rtts_ms)[-5:]


OVERFLOWING_SSML = [
    f'<speak>a<break time="{"9" * 400}ms"/>b</speak>',  # round(inf)
    '<speak><prosody volume="+6200dB">loud</prosody></speak>',  # 10 ** 310
    f'<speak><prosody rate="{"9" * 400}%">fast</prosody></speak>',
    f'<speak><say-as interpret-as="date" format="y">{"9" * 400}</say-as></speak>',  # num2words
    f'<speak><say-as interpret-as="date" format="dmy">{"9" * 5000} 1 2</say-as></speak>',  # int()
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("src", OVERFLOWING_SSML, ids=["break", "volume", "rate", "year", "day"])
def test_ssml_numbers_that_overflow_are_answered(daemon: Daemon, src: str) -> None:
    """These requests got no event at all: the exception escaped the request's task."""
    with Wire(daemon.socket, timeout=60) as w:
        w.send({"op": "phonemes", "id": 1, "text": src, "text_format": "ssml"})
        assert w.until(1, ("phonemes", "error"))[-1]["event"] == "phonemes"
        w.send({"op": "synthesize", "id": 2, "text": src, "text_format": "ssml"})
        evs = _first_answer(w, 2)
        assert evs[-1]["event"] in ("chunk", "end"), evs[-1]
        assert w.call({"op": "ping", "id": 3})["event"] == "pong"


def test_a_document_of_breaks_is_refused_before_any_audio(daemon: Daemon) -> None:
    """300 × <break time="10s"/> (6 KB) gave 52 minutes of audio."""
    src = "<speak>" + '<break time="10s"/>a ' * 300 + "</speak>"
    with Wire(daemon.socket, timeout=60) as w:
        w.send({"op": "synthesize", "id": 1, "text": src, "text_format": "ssml"})
        (err,) = w.until(1)
        assert err["event"] == "error" and err["code"] == "bad_request", err
        assert "60 s" in err["message"]


PIPES = "|" * 19_999 + "a"
"""A run of table pipes that does not end its line: the plain reading's line-end look-ahead
rescanned it from each pipe (1.5 s on the bench, holding the GIL: every door waited)."""
MARKDOWN_RUNS: list[dict[str, Any]] = [
    {"op": "synthesize", "text": PIPES},
    {"op": "synthesize", "text": PIPES},
    {"op": "phonemes", "text": PIPES},
    {"op": "phonemes", "text": PIPES},
    {"op": "synthesize", "text": "a" + "_" * 19_998 + "a"},
    {"op": "phonemes", "text": "] " * 9_999 + "a"},
    {"op": "synthesize", "text": '"' * 19_999 + "a"},
    {"op": "synthesize", "text_stream": True, "text": PIPES},
]


def _first_answers(w: Wire, rids: set[int]) -> dict[int, dict[str, Any]]:
    """Each of ``rids``' first chunk or its end, as they come (the rest is cancelled)."""
    got: dict[int, dict[str, Any]] = {}
    while len(got) < len(rids):
        ev = w.recv(timeout=120)
        assert ev is not None
        rid = ev.get("id")
        if rid not in rids or rid in got or ev["event"] == "start":
            continue
        got[rid] = ev
        if ev["event"] == "chunk":
            w.send({"op": "cancel", "id": rid + 1000, "target": rid})
    return got


@pytest.mark.timeout(600)
def test_eight_markdown_runs_at_once_leave_pings_answered(daemon: Daemon) -> None:
    """8 Markdown requests of 20 000 hostile characters in flight at once: each is answered
    and pings keep being answered (before, seconds behind each parse)."""
    with Wire(daemon.socket, timeout=120) as w, PingProbe(daemon.socket) as probe:
        time.sleep(0.2)
        t0 = time.perf_counter()
        for rid, req in enumerate(MARKDOWN_RUNS, 1):
            # Not real time: admission would say busy to some, before their text is read.
            realtime = {"realtime": False} if req["op"] == "synthesize" else {}
            w.send({**req, **realtime, "id": rid, "text_format": "markdown"})
            if req.get("text_stream"):
                w.send({"op": "finish", "target": rid})
        answers = _first_answers(w, set(range(1, len(MARKDOWN_RUNS) + 1)))
        took = time.perf_counter() - t0
        time.sleep(0.2)
    for rid, ev in answers.items():
        assert ev["event"] in ("chunk", "end", "phonemes") or ev.get("code") == "empty_text", (
            rid,
            ev,
        )
    assert took < 60, took
    # Before, each parse held the GIL for 1.5 s (12 s on a busy 2-core box): every ping
    # waited.  Generous bounds (the goal, 50 ms, is measured by the bench of the report):
    # nine in ten pings within 250 ms, none past a second, on a shared box.
    rtts = sorted(probe.rtts_ms)
    assert len(rtts) > 20
    assert rtts[int(len(rtts) * 0.9)] < 250 and rtts[-1] < 1000, rtts[-5:]


@pytest.mark.timeout(600)
def test_a_markdown_text_stream_s_pauses_stop_at_the_cap(daemon_factory: DaemonFactory) -> None:
    """A text stream's segments were each read with the whole cap: 24 headings of 5 s, one a
    segment, gave 2 minutes of silence.  The request's pauses add up to 60 s (the SSML cap)."""
    d = daemon_factory({"markdown": {"heading_pause_ms": 5000}})
    with Client(d.socket) as c:
        ts = c.text_stream(text_format="markdown", noise_scale=0.0, noise_w=0.0)
        for _ in range(24):
            ts.append("# a\n\n", flush=True)
            time.sleep(0.02)
        ts.finish()
        res = ts.collect()
    seconds = len(res.audio) / 2 / 22050
    assert len(res.chunks) >= 24
    assert MAX_TOTAL_BREAK_MS / 1000 < seconds < MAX_TOTAL_BREAK_MS / 1000 + 20, seconds
