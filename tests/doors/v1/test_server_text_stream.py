"""Text streams over protocol v1 on the real daemon: text appended before the stream is
open (still being admitted and prepared) is held in characters, never in a count of
messages, and none of it is dropped (issue 42, item 15)."""

from __future__ import annotations

from typing import Any

import msgpack

from tests.conftest import Daemon
from tests.wire import Wire


def _early(rid: int, pieces: list[str], finish: bool = True) -> bytes:
    """A text stream and its appends in one write: the daemon reads them all before the
    stream is open (it opens once the read loop yields)."""
    msgs: list[dict[str, Any]] = [
        {"op": "synthesize", "id": rid, "text_stream": True, "realtime": False}
    ]
    msgs += [{"op": "append", "target": rid, "text": p} for p in pieces]
    if finish:
        msgs.append({"op": "finish", "target": rid})
    return b"".join(msgpack.packb(m) for m in msgs)


def test_appends_before_the_stream_opens_are_not_capped_by_count(daemon: Daemon) -> None:
    """1 500 empty appends between two sentences: before, those past 1 024 were refused
    (``refused: true``, which clients may ignore), the second sentence and the finish among
    them, and the request ended after ``text_timeout_s`` with ``text_timeout``."""
    first, last = "Hello there. ", "Goodbye now."
    with Wire(daemon.socket) as w:
        w.send_raw(_early(1, [first, *[""] * 1500, last]))
        events = w.until(1)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end", events[-1]
    assert "error" not in kinds, [e for e in events if e["event"] == "error"][:2]
    spans = [e["text_span"] for e in events if e["event"] == "chunk"]
    assert max(b for _, b in spans) == len(first + last)  # the last sentence was spoken


def test_a_flush_among_early_appends_is_kept(daemon: Daemon) -> None:
    """A flush before the stream opened still releases all the text before it, without a
    finish (without the flush, only the idle rule would speak, and only up to the last
    word boundary: "Speak this")."""
    text = "Speak this part"
    with Wire(daemon.socket) as w:
        data = _early(2, [text], finish=False)
        data += msgpack.packb({"op": "append", "target": 2, "text": "", "flush": True})
        w.send_raw(data)
        spoken = 0
        while spoken < len(text):
            ev = w.recv(timeout=20)
            assert ev is not None and ev["event"] in ("start", "chunk"), ev
            if ev["event"] == "chunk":
                spoken = max(spoken, ev["text_span"][1])
        w.send({"op": "finish", "target": 2})
        assert w.until(2)[-1]["event"] == "end"


def test_early_text_over_max_text_chars_ends_the_request(daemon: Daemon) -> None:
    """Held text is bounded by ``max_text_chars`` (20 000 here): past it nothing more is
    kept and the request ends with ``text_too_long`` once open, its one terminal event."""
    with Wire(daemon.socket) as w:
        w.send_raw(_early(3, ["word " * 200] * 21))  # 21 000 characters
        events = w.until(3)
        assert events[0]["event"] == "start", events[0]
        assert [e["event"] for e in events].count("error") == 1
        assert events[-1]["event"] == "error" and events[-1]["code"] == "text_too_long"
        assert "refused" not in events[-1]
        assert w.call({"op": "ping", "id": 4})["event"] == "pong"
