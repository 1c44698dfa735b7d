"""Bad input gets its documented error and everyone else keeps being served."""

from __future__ import annotations

import math
import socket
import time

import msgpack
import pytest

from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire


def _ping_ok(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        assert w.call({"op": "ping", "id": 7})["event"] == "pong"
    assert daemon.alive()


def _error(w: Wire, rid: int | None = None) -> dict:
    ev = w.recv()
    assert ev is not None
    assert ev["event"] == "error", ev
    assert ev["id"] == rid
    return ev


def test_malformed_msgpack_gets_error_and_close(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send_raw(b"\xc1\xc1\xc1")  # 0xc1 is never used in msgpack
        ev = _error(w)
        assert ev["code"] == "bad_request"
        assert w.recv() is None  # closed cleanly
    _ping_ok(daemon)


def test_non_map_message_is_error_and_connection_goes_on(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send([1, 2, 3])
        assert _error(w)["code"] == "bad_request"
        w.send("hello")
        assert _error(w)["code"] == "bad_request"
        assert w.call({"op": "ping", "id": 1})["event"] == "pong"


@pytest.mark.parametrize(
    "msg",
    [
        {"id": 1},  # no op
        {"op": 5, "id": 1},
        {"op": "synthesize", "id": 1},  # no text
        {"op": "synthesize", "id": 1, "text": 42},
        {"op": "synthesize", "id": 1, "text": "hi", "speed": "fast"},
        {"op": "synthesize", "id": 1, "text": "hi", "format": "mp3"},
        {"op": "synthesize", "id": 1, "text": "hi", "mode": "shout"},
        {"op": "synthesize", "id": 1, "text": "hi", "realtime": "yes"},
        {"op": "synthesize", "id": 1, "text": "hi", "sample_rate": 44100.5},
        {"op": "cancel", "id": 1},
        {"op": "cancel", "id": 1, "target": "x"},
    ],
    ids=lambda m: ",".join(f"{k}={v!r}"[:20] for k, v in m.items()),
)
def test_missing_or_mistyped_fields(daemon: Daemon, msg: dict) -> None:
    with Wire(daemon.socket) as w:
        w.send(msg)
        assert _error(w, 1)["code"] == "bad_request"
        assert w.call({"op": "ping", "id": 2})["event"] == "pong"


def test_bad_id_type(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "ping", "id": "one"})
        assert _error(w, None)["code"] == "bad_request"


@pytest.mark.parametrize(
    "field,value",
    [
        ("speed", math.nan),
        ("speed", math.inf),
        ("speed", 0.1),
        ("speed", 5),
        ("volume", -1),
        ("volume", math.inf),
        ("noise_scale", -0.5),
        ("noise_w", math.nan),
        ("sample_rate", 10),
        ("sample_rate", 10**12),
    ],
)
def test_nan_inf_out_of_range(daemon: Daemon, field: str, value: float) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 3, "text": "hello", field: value})
        assert _error(w, 3)["code"] == "bad_request"


def test_unknown_op(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "sing", "id": 4})
        assert _error(w, 4)["code"] == "unknown_op"


@pytest.mark.parametrize("text", ["", "   ", "\n\t  \r\n"])
def test_empty_text(daemon: Daemon, text: str) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 5, "text": text})
        assert _error(w, 5)["code"] == "empty_text"


def test_emoji_only_is_empty(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 6, "text": "😀🎉👍🏽"})
        assert _error(w, 6)["code"] == "empty_text"


def test_text_too_long(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 7, "text": "a " * 10001})
        assert _error(w, 7)["code"] == "text_too_long"


def test_unsupported_script(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 8, "text": "你好，世界。今天天气很好。"})
        assert _error(w, 8)["code"] == "unsupported_text"


@pytest.mark.parametrize(
    "voice", ["nope", "../../etc/passwd", "/etc/passwd", "en_US-joe-medium/../x", "x" * 200]
)
def test_unknown_voice_never_touches_the_filesystem(daemon: Daemon, voice: str) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 9, "text": "hello", "voice": voice})
        assert _error(w, 9)["code"] == "unknown_voice"


def test_oversized_frame(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        big = msgpack.packb({"op": "synthesize", "id": 10, "text": "a" * 200_000})
        try:
            w.send_raw(big)
        except (BrokenPipeError, ConnectionResetError):
            pass
        ev = w.recv()
        assert ev is not None and ev["code"] == "frame_too_large"
    _ping_ok(daemon)


def test_invalid_utf8_is_bad_request_and_connection_goes_on(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        # fixmap(3) "op" "synthesize" "id" 11 "text" <str8 with invalid bytes>
        raw = (
            b"\x83"
            + msgpack.packb("op")
            + msgpack.packb("synthesize")
            + msgpack.packb("id")
            + msgpack.packb(11)
            + msgpack.packb("text")
            + b"\xa4\xff\xfe\xfd\xfc"
        )
        w.send_raw(raw)
        assert _error(w, 11)["code"] == "bad_request"
        assert w.call({"op": "ping", "id": 12})["event"] == "pong"


def test_control_characters_are_removed(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 13, "text": "Hello\x00\x07\x1b[31m wo\u200brld\x7f."})
        evs = w.until(13)
        assert evs[0]["event"] == "start" and evs[-1]["event"] == "end"
        assert any(e["event"] == "chunk" for e in evs)


def test_ssml_looking_text_is_read_as_text(daemon: Daemon) -> None:
    text = (
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
        "<speak>&e; hi</speak>"
    )
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 14, "text": text, "mode": "sentence"})
        evs = w.until(14)
        assert evs[-1]["event"] == "end"
        # Spans point into the text as sent; nothing was expanded from the entity.
        for e in evs:
            if e["event"] == "chunk":
                a, b = e["text_span"]
                assert 0 <= a <= b <= len(text)


def test_duplicate_inflight_id(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 20, "text": "This is a long enough sentence. " * 6})
        w.send({"op": "synthesize", "id": 20, "text": "again"})
        evs = w.until(20, ("error",))
        assert evs[-1]["code"] == "duplicate_id"
        rest = w.until(20)
        assert rest[-1]["event"] == "end"


def test_cancel_unknown_id(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "cancel", "id": 21, "target": 999})
        assert _error(w, 21)["code"] == "bad_request"


def test_disconnect_mid_stream_frees_work(daemon: Daemon) -> None:
    w = Wire(daemon.socket)
    w.send({"op": "synthesize", "id": 22, "text": "A long text that goes on. " * 40})
    ev = w.recv()
    assert ev is not None and ev["event"] == "start"
    w.close()
    deadline = time.monotonic() + 20
    with Wire(daemon.socket) as s:
        while True:
            st = s.call({"op": "stats", "id": 1})
            if st["queue_depth"] == 0 and not st["streams"]:
                break
            assert time.monotonic() < deadline, st
            time.sleep(0.1)
    _ping_ok(daemon)


def test_client_that_never_reads_gets_client_too_slow(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        slow_before = w.call({"op": "stats", "id": 1})["errors"].get("client_too_slow", 0)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(daemon.socket)
    text = "This request produces far more audio than the buffers can hold. " * 30
    sock.sendall(msgpack.packb({"op": "synthesize", "id": 30, "text": text, "format": "f32le"}))
    # While it is stuck, others are served.
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text": "Still here."})
        assert w.until(1)[-1]["event"] == "end"
    # The daemon gives up once the client has not read for client_too_slow_s (2 s here)
    # beyond the audio it already holds.
    deadline = time.monotonic() + 60
    with Wire(daemon.socket) as w:
        while (
            w.call({"op": "stats", "id": 1})["errors"].get("client_too_slow", 0) < slow_before + 1
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=1 << 28)
    sock.settimeout(10)
    last = None
    while True:
        data = sock.recv(1 << 16)
        if not data:
            break
        unpacker.feed(data)
        for m in unpacker:
            if m.get("event") in ("end", "error"):
                last = m
        if last is not None:
            break
    sock.close()
    assert last is not None and last["event"] == "error", last
    assert last["code"] == "client_too_slow"
    _ping_ok(daemon)


def test_small_messages_sent_back_to_back_are_all_taken(daemon: Daemon) -> None:
    """Issue 32, item 7: three 40 KB messages, ten 19 KB phonemes, 10 000 appends in one
    write: each is under max_message_bytes (64 KiB), so none is frame_too_large."""
    with Wire(daemon.socket) as w:
        w.send_raw(
            b"".join(msgpack.packb({"op": "ping", "id": i, "pad": "p" * 40000}) for i in range(3))
        )
        replies = [w.recv() for _ in range(3)]
        assert [r and r["event"] for r in replies] == ["pong"] * 3, replies
        text = "Hello there. " * 1460  # 19 KB
        w.send_raw(
            b"".join(
                msgpack.packb({"op": "phonemes", "id": 10 + i, "text": text}) for i in range(10)
            )
        )
        got = [w.until(10 + i, ("phonemes", "error"))[-1]["event"] for i in range(10)]
        assert got == ["phonemes"] * 10
        w.send({"op": "synthesize", "id": 30, "text_stream": True})
        appends = b"".join(
            msgpack.packb({"op": "append", "target": 30, "text": "a "}) for _ in range(10000)
        )
        w.send_raw(appends + msgpack.packb({"op": "cancel", "id": 31, "target": 30}))
        evs = w.until(30)
        assert evs[0]["event"] == "start", evs[0]
        assert evs[-1]["event"] == "end" and evs[-1]["cancelled"] is True, evs[-1]
        assert w.until(31, ("cancelled",))[-1]["event"] == "cancelled"
        assert w.call({"op": "ping", "id": 32})["event"] == "pong"


FAULT = "FAULT-INJECTED"
"""Text with this in it makes the daemon's frontend raise (tests/fakes/daemon.py)."""


def test_any_exception_on_a_requests_path_ends_it_with_internal(
    daemon_factory: DaemonFactory,
) -> None:
    """Issue 32, item 4: the doors caught only ServiceError; a request whose frontend
    raised anything else got no event at all, ever (v1 synthesize, speak, phonemes)."""
    d = daemon_factory({}, seams=["--frontend-fault", FAULT])
    text = f"Hello {FAULT} there."
    with Wire(d.socket, timeout=10) as w:
        w.send({"op": "synthesize", "id": 1, "text": text})
        w.send({"op": "speak", "id": 2, "text": text})
        w.send({"op": "phonemes", "id": 3, "text": text})
        for rid in (1, 2, 3):
            evs = w.until(rid, ("end", "error", "phonemes"))
            assert [e["event"] for e in evs] == ["error"], evs
            assert evs[0]["code"] == "internal" and "refused" not in evs[0]
        # A text stream whose segment the frontend fails on: start, then its one error.
        w.send({"op": "synthesize", "id": 4, "text_stream": True, "text": "Fine so far. "})
        w.send({"op": "append", "target": 4, "text": f"Then {FAULT}. "})
        w.send({"op": "finish", "target": 4})
        evs = w.until(4)
        assert evs[0]["event"] == "start" and evs[-1]["event"] == "error", evs
        assert evs[-1]["code"] == "internal"
        assert [e["event"] for e in evs].count("error") == 1
        # A long one-shot text, prepared head first, whose rest the frontend fails on
        # (issue 28): start, its head's audio, then its one error.
        w.send({"op": "synthesize", "id": 6, "text": "Fine so far. " * 40 + f"Then {FAULT}."})
        evs = w.until(6)
        assert evs[0]["event"] == "start" and evs[-1]["event"] == "error", evs
        assert evs[-1]["code"] == "internal"
        assert [e["event"] for e in evs].count("error") == 1
        # The connection and the daemon go on.
        w.send({"op": "synthesize", "id": 5, "text": "Still served."})
        assert w.until(5)[-1]["event"] == "end"
    assert "Traceback" in d.log()  # the bug is in the log (once), not in the reply
