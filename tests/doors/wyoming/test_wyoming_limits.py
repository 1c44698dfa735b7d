"""Connection limits and the TCP address check (Wyoming has no authentication)."""

from __future__ import annotations

import asyncio
import contextlib

from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info

from tests.conftest import Daemon, DaemonFactory, flood_until_closed
from tests.doors.wyoming.wyoming_helpers import client_for, wyoming_uri


async def test_per_client_connection_limit(wy_uri: str, wy_daemon: Daemon) -> None:
    clients = []
    try:
        for _ in range(12):  # max_connections_per_uid in this daemon's config
            c = client_for(wy_uri)
            await c.connect()
            await c.write_event(Describe().event())
            ev = await c.read_event()
            assert ev is not None and Info.is_type(ev.type)
            clients.append(c)
        extra = client_for(wy_uri)
        await extra.connect()
        ev = await extra.read_event()
        assert ev is not None and ev.type == "error", ev
        assert ev.data["code"] == "too_many_connections_for_user"
        assert await extra.read_event() is None  # and closed
        await extra.disconnect()
    finally:
        for c in clients:
            await c.disconnect()
    # Freed slots are taken again.
    await asyncio.sleep(0.2)
    async with client_for(wy_uri) as c:
        await c.write_event(Describe().event())
        ev = await c.read_event()
        assert ev is not None and Info.is_type(ev.type)


async def test_address_outside_allowed_networks_is_refused(wy_uri: str) -> None:
    host, port = wy_uri[len("tcp://") :].rsplit(":", 1)
    # allowed_networks is 127.0.0.1/32 here: 127.0.0.2 is loopback but not allowed.
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=("127.0.0.2", 0))
    try:
        line = await asyncio.wait_for(reader.readline(), 10)
        import json

        header = json.loads(line)
        assert header["type"] == "error"
        data = json.loads(await reader.readexactly(header["data_length"]))
        assert data["code"] == "unauthorized"
        assert await asyncio.wait_for(reader.read(), 10) == b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    # The allowed address is served.
    c = AsyncTcpClient(host, int(port))
    async with c:
        await c.write_event(Describe().event())
        ev = await c.read_event()
        assert ev is not None and Info.is_type(ev.type)


def test_error_flood_from_a_client_that_never_reads_is_bounded(
    daemon_factory: DaemonFactory,
) -> None:
    """Every stray synthesize-chunk gets an error; past the in-flight limit each is said at
    once.  A client that sends them and never reads must meet the output bound (its
    connection stops being read, then is closed), not grow the daemon."""
    import socket

    import psutil

    d = daemon_factory(
        {
            "wyoming": {"uri": "tcp://127.0.0.1:0"},
            "limits": {"client_too_slow_s": 1.0, "max_output_buffer_bytes": 65536},
        }
    )
    host, port = wyoming_uri(d).removeprefix("tcp://").rsplit(":", 1)
    rss = lambda: psutil.Process(d.proc.pid).memory_info().rss / 1e6  # noqa: E731
    base = rss()
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    line = b'{"type": "synthesize-chunk", "data": {"text": "x"}}\n'
    flood = line * ((8 << 20) // len(line))  # ~160 000 events, each answered with an error
    sent, closed = flood_until_closed(s, flood)
    s.close()
    assert closed and sent < len(flood)
    assert rss() - base < 60
    with socket.create_connection((host, int(port)), timeout=10) as again:
        again.sendall(b'{"type": "describe"}\n')
        assert b'"type": "info"' in again.recv(65536)
