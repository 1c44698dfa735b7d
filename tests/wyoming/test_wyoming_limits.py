"""Connection limits and the TCP address check (Wyoming has no authentication)."""

from __future__ import annotations

import asyncio
import contextlib

from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info

from tests.conftest import Daemon
from tests.wyoming.wyoming_helpers import client_for


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
