"""The HTTP door before any key is checked (issue 32, item 5): connections counted from
accept, idle and slowloris ones closed soon and giving way to newcomers, request heads
capped in bytes, descriptors kept for the Unix socket, a full descriptor table logged in
one line, not a traceback storm."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import resource
import time

import psutil
import pytest
from wyoming.info import Describe, Info

from appliance.doors.net import fds_needed
from appliance.ops.config import Config, HttpConfig, LimitsConfig, WyomingConfig
from tests.conftest import REPO, DaemonFactory
from tests.doors.http.conftest import HttpDaemon, start_http
from tests.doors.wyoming.wyoming_helpers import client_for, wyoming_uri
from tests.wire import Wire


def _hostport(d: HttpDaemon) -> tuple[str, int]:
    host, port = d.base.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def _get(d: HttpDaemon, path: str = "/healthz") -> int:
    """One request on its own connection: the status (0: no answer within 5 s)."""
    host, port = _hostport(d)
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            line = await reader.readline()
            writer.close()
    except (TimeoutError, OSError):
        return 0
    m = re.match(rb"HTTP/1\.[01] (\d+)", line)
    return int(m.group(1)) if m else 0


async def _speech(d: HttpDaemon) -> int:
    host, port = _hostport(d)
    body = json.dumps({"input": "Hello.", "response_format": "pcm"}).encode()
    async with asyncio.timeout(30):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        line = await reader.readline()
        while await reader.read(65536):
            pass
        writer.close()
    return int(line.split()[1])


@pytest.fixture(scope="module")
def door(daemon_factory: DaemonFactory) -> HttpDaemon:
    return start_http(daemon_factory, {"header_timeout_s": 2.0, "head_timeout_s": 4.0})


def test_idle_connections_do_not_keep_anyone_out(door: HttpDaemon) -> None:
    """70 connections that send nothing (the cap is 64): /healthz and speech are served
    while they are held (they were 503 for as long as they were), and they are closed
    after header_timeout_s."""

    async def go() -> tuple[list[int], int, int]:
        host, port = _hostport(door)
        idle = [await asyncio.open_connection(host, port) for _ in range(70)]
        await asyncio.sleep(0.3)
        health = [await _get(door) for _ in range(5)]
        speech = await _speech(door)
        await asyncio.sleep(2.5)
        closed = 0
        for reader, writer in idle:
            with contextlib.suppress(TimeoutError, OSError):
                async with asyncio.timeout(1):
                    if await reader.read(1) == b"":
                        closed += 1
            writer.close()
        return health, speech, closed

    health, speech, closed = asyncio.run(go())
    assert health == [200] * 5 and speech == 200
    assert closed == 70


def test_slowloris_connections_are_cut_and_do_not_keep_anyone_out(door: HttpDaemon) -> None:
    """70 connections each sending a header line every second: /healthz answers all the
    while, and each is answered 408 (or made room for a newcomer) by head_timeout_s."""

    async def slow() -> tuple[bytes, float]:
        host, port = _hostport(door)
        reader, writer = await asyncio.open_connection(host, port)
        t0 = time.monotonic()
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        got = b""
        with contextlib.suppress(OSError):
            for i in range(30):
                writer.write(b"X-Slow-%d: 1\r\n" % i)
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        got = await reader.read(200)
                if got or reader.at_eof():
                    break
        writer.close()
        return got, time.monotonic() - t0

    async def go() -> tuple[list[int], list[tuple[bytes, float]]]:
        lorises = [asyncio.create_task(slow()) for _ in range(70)]
        await asyncio.sleep(1.5)
        health = []
        for _ in range(4):
            health.append(await _get(door))
            await asyncio.sleep(0.5)
        return health, await asyncio.gather(*lorises)

    health, lorises = asyncio.run(go())
    assert health == [200] * 4
    assert max(t for _got, t in lorises) < 4.0 + 2.0
    answered = [got for got, _t in lorises if got]
    assert answered and all(g.startswith(b"HTTP/1.1 408") for g in answered), answered[:3]


def test_unfinished_headers_are_capped_in_bytes(door: HttpDaemon) -> None:
    """40 connections sending 1 MB of headers that never end: each is answered 431 once
    its head passes http.max_header_bytes (16 KiB); they cost ~2 MB of RSS each before."""
    pid = door.daemon.proc.pid
    before = psutil.Process(pid).memory_info().rss

    async def one() -> tuple[bytes, asyncio.StreamWriter]:
        host, port = _hostport(door)
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        with contextlib.suppress(OSError):
            for i in range(256):  # 1 MB, 4 KB a header
                writer.write(b"X-%d: %s\r\n" % (i, b"a" * 4096))
                await writer.drain()
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(5):
                return await reader.read(300), writer
        return b"", writer

    async def go() -> tuple[list[bytes], int, int]:
        results = await asyncio.gather(*(one() for _ in range(40)))
        held = psutil.Process(pid).memory_info().rss
        health = await _get(door)
        for _got, writer in results:
            writer.close()
        return [got for got, _w in results], held, health

    answers, held, health = asyncio.run(go())
    assert all(a.startswith(b"HTTP/1.1 431") for a in answers), {a[:40] for a in answers}
    assert health == 200
    assert (held - before) / 1e6 < 20, (before, held)


async def _flood_then_ask(d: HttpDaemon, n: int) -> tuple[int, bool, bool, int]:
    """Hold ``n`` idle HTTP connections; then whether v1 and Wyoming answer, and /healthz."""
    host, port = _hostport(d)
    conns = []
    for _ in range(n):
        with contextlib.suppress(OSError):
            conns.append(await asyncio.open_connection(host, port))
    await asyncio.sleep(0.5)
    with Wire(d.daemon.socket, timeout=10) as w:
        pong = w.call({"op": "ping", "id": 1})["event"] == "pong"
    wy = False
    if "wyoming" in d.daemon.config_path.read_text():
        async with asyncio.timeout(10), client_for(wyoming_uri(d.daemon)) as c:
            await c.write_event(Describe().event())
            ev = await c.read_event()
            wy = ev is not None and Info.is_type(ev.type)
    health = await _get(d)
    for _r, writer in conns:
        writer.close()
    return len(conns), pong, wy, health


def _more_files_here() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))


def test_idle_connections_cannot_take_every_descriptor(daemon_factory: DaemonFactory) -> None:
    """Under nofile=1024, 1 100 idle HTTP connections used every descriptor: v1, Wyoming
    and HTTP all stopped answering, with 44 163 accept tracebacks in 23 s.  They count
    against http.max_connections from accept now: all three doors answer."""
    _more_files_here()
    d = start_http(
        daemon_factory,
        wyoming={"uri": "tcp://127.0.0.1:0", "allowed_networks": ["127.0.0.1/32"]},
        nofile=1024,
    )
    assert asyncio.run(_flood_then_ask(d, 1100)) == (1100, True, True, 200)
    log = d.daemon.log()
    assert "Traceback" not in log and "Too many open files" not in log, log[-3000:]
    d.daemon.stop()


def test_descriptors_are_kept_for_the_unix_socket(daemon_factory: DaemonFactory) -> None:
    """With an HTTP cap above what the descriptors allow, the TCP doors leave
    limits.reserved_fds free: the Unix socket and /healthz are answered while 1 100 idle
    connections are held, and the log says so in a line or two, not in tracebacks."""
    _more_files_here()
    d = start_http(daemon_factory, {"max_connections": 5000}, nofile=1024)
    opened, pong, _wy, health = asyncio.run(_flood_then_ask(d, 1100))
    assert opened == 1100 and pong and health == 200
    log = d.daemon.log()
    assert "Traceback" not in log, log[-3000:]
    assert log.count("Too many open files") <= 3
    assert "raise LimitNOFILE" in log  # the start-up warning says what the limits need
    d.daemon.stop()


def test_the_descriptors_the_limits_need() -> None:
    """The arithmetic docs/service.md gives for LimitNOFILE: the daemon's own 64, the
    reserve, each door's connections, the HTTP door's refusals in progress."""
    cfg = Config()
    assert fds_needed(cfg) == 64 + 256 + 256
    both = Config(
        http=HttpConfig(listen="127.0.0.1:8880"),
        wyoming=WyomingConfig(uri="tcp://127.0.0.1:10200"),
        limits=LimitsConfig(),
    )
    assert fds_needed(both) == 64 + 256 + 256 + 256 + 64 + 32
    unit = (REPO / "systemd" / "ttsd.service").read_text()
    limit = re.search(r"^LimitNOFILE=(\d+)$", unit, re.M)
    assert limit is not None and int(limit.group(1)) >= fds_needed(both)
