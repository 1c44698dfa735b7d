"""The one too-slow rule, end to end on every door (protocol v1, Wyoming, HTTP): a client
that reads its audio steadily at real time is never cut off, however long the output sits
at its bound; one that stops reading is cut off within ``limits.client_too_slow_s`` plus
the audio it already holds."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import msgpack
import pytest

from tests.conftest import Daemon, DaemonFactory
from tests.doors.http.conftest import free_port
from tests.doors.wyoming.wyoming_helpers import wyoming_uri
from tests.wire import Wire

TOO_SLOW_S = 1.0
BOUND = 65536
BYTES_PER_S = 2 * 22050
"""s16le mono at the voice's rate: what each door sends, give or take its framing."""
TEXT = (
    "The museum on the hill will be closed for repairs until the end of the month, but the "
    "gardens and the little cafe by the lake stay open every day from nine until six. "
    "Visitors who arrive after the main entrance has closed should use the side door next "
    "to the car park, where a member of staff will check their tickets and show them the way."
)
"""~15 s of audio: more than the output bound and every kernel buffer on the way hold."""


@pytest.fixture(scope="module")
def box(daemon_factory: DaemonFactory) -> tuple[Daemon, int]:
    port = free_port()
    d = daemon_factory(
        {
            "limits": {"client_too_slow_s": TOO_SLOW_S, "max_output_buffer_bytes": BOUND},
            "wyoming": {"uri": "tcp://127.0.0.1:0", "allowed_networks": ["127.0.0.1/32"]},
            "http": {"listen": f"127.0.0.1:{port}"},
        }
    )
    return d, port


def _v1(d: Daemon, port: int) -> tuple[socket.socket, Callable[[bytes], bool]]:
    s = socket.socket(socket.AF_UNIX)
    s.connect(d.socket)
    s.sendall(msgpack.packb({"op": "synthesize", "id": 1, "text": TEXT}))
    return s, lambda seen: b"\xa5event\xa3end" in seen


def _tcp(host: str, port: int) -> socket.socket:
    """A client with a small receive buffer: what it has not read stays on the daemon's side."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, port))
    return s


def _wyoming(d: Daemon, port: int) -> tuple[socket.socket, Callable[[bytes], bool]]:
    host, wport = wyoming_uri(d)[len("tcp://") :].rsplit(":", 1)
    s = _tcp(host, int(wport))
    s.sendall(json.dumps({"type": "synthesize", "data": {"text": TEXT}}).encode() + b"\n")
    return s, lambda seen: b'"audio-stop"' in seen


def _http(d: Daemon, port: int) -> tuple[socket.socket, Callable[[bytes], bool]]:
    s = _tcp("127.0.0.1", port)
    body = json.dumps({"input": TEXT, "response_format": "pcm"}).encode()
    head = (
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    s.sendall(head.encode() + body)
    return s, lambda seen: seen.endswith(b"0\r\n\r\n")


DOORS = {"v1": _v1, "wyoming": _wyoming, "http": _http}


def _closed(s: socket.socket) -> bool:
    """The daemon closed or reset the connection (seen without reading what is pending)."""
    p = select.poll()
    p.register(s.fileno(), select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return bool(p.poll(0))


def _read_at_real_time(box: tuple[Daemon, int], door: str) -> tuple[int, float]:
    """(bytes read, seconds taken) by a client that reads 4 KB at a time at real-time pace."""
    s, ended = DOORS[door](*box)
    seen = b""
    t0 = time.monotonic()
    s.settimeout(15)
    with s:
        while not ended(seen[-4096:]):
            piece = s.recv(4096)
            assert piece, f"{door}: closed after {len(seen)} bytes"
            seen += piece
            # Real time (a little faster: framing), from the first byte on.
            ahead = len(seen) / (1.05 * BYTES_PER_S) - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    return len(seen), time.monotonic() - t0


@pytest.fixture(scope="module")
def real_time_reads(box: tuple[Daemon, int]) -> dict[str, Future[tuple[int, float]]]:
    """One real-time reader on each door, all at once (each takes its ~15 s of audio)."""
    with ThreadPoolExecutor(len(DOORS)) as pool:
        return {door: pool.submit(_read_at_real_time, box, door) for door in DOORS}


@pytest.mark.parametrize("door", DOORS)
def test_a_client_reading_at_real_time_is_never_cut_off(
    real_time_reads: dict[str, Future[tuple[int, float]]], door: str
) -> None:
    """The output bound is 1.5 s of audio: it sits at the bound for most of the stream,
    while the client reads 4 KB at a time at real-time pace."""
    read, took = real_time_reads[door].result()
    assert read > 4 * BYTES_PER_S  # seconds of audio, past the bound many times
    assert took > 3 * TOO_SLOW_S


def _gave_up(d: Daemon) -> int:
    """How many times the daemon has ended a client with client_too_slow (every door's)."""
    with Wire(d.socket) as w:
        return int(w.call({"op": "stats", "id": 1})["errors"].get("client_too_slow", 0))


@pytest.mark.parametrize("door", DOORS)
def test_a_client_that_stops_reading_is_cut_off(box: tuple[Daemon, int], door: str) -> None:
    d = box[0]
    before = _gave_up(d)
    s, _ = DOORS[door](*box)
    with s:
        s.settimeout(15)
        first = s.recv(4096)
        assert first
        stopped = time.monotonic()
        # What it holds: what it read, plus what the daemon may have sent past that (the
        # output bound, the kernel's buffers: a Unix socket's count twice the bound): a
        # generous ceiling.
        held_s = (len(first) + 5 * BOUND) / BYTES_PER_S
        deadline = stopped + TOO_SLOW_S + held_s + 3.0
        while _gave_up(d) == before:
            assert time.monotonic() < deadline, f"{door}: not cut off in time"
            time.sleep(0.05)
        took = time.monotonic() - stopped
        # And its connection goes (v1 lets it read why for client_too_slow_s first).
        while not _closed(s):
            assert time.monotonic() < deadline + TOO_SLOW_S + 1.0, f"{door}: still open"
            time.sleep(0.05)
    assert took >= TOO_SLOW_S * 0.9, f"{door}: cut off before client_too_slow_s ({took:.2f} s)"
