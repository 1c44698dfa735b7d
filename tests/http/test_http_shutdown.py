"""Shutdown: while the core drains, /healthz says 503 and new speech is refused, the
stream in flight goes on, and the daemon exits when it is done."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import aiohttp

from tests.conftest import DaemonFactory
from tests.http.conftest import start_http

LONG = "Every spring someone paints the chapel door blue, and nobody knows who. " * 40


def test_healthz_is_503_while_draining(daemon_factory: DaemonFactory) -> None:
    d = start_http(daemon_factory, cli_flag=True, server={"shutdown_timeout_s": 60.0})

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with aiohttp.ClientSession() as s:
            async with s.get(d.base + "/healthz") as r:
                out["before"] = r.status
            r = await s.post(d.v1 + "/audio/speech", json={"input": LONG, "response_format": "pcm"})
            assert r.status == 200
            await r.content.readexactly(4096)
            d.daemon.proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            seen: list[tuple[int, dict[str, Any]]] = []
            received = 0
            while time.monotonic() - t0 < 15.0:
                # The stream in flight keeps flowing (read like a slow player)...
                received += len(await r.content.read(8192))
                # ... while fresh connections are told to go elsewhere.
                async with aiohttp.ClientSession() as fresh:
                    async with fresh.get(d.base + "/healthz") as h:
                        seen.append((h.status, await h.json()))
                    if seen[-1][0] == 503:
                        async with fresh.post(d.v1 + "/audio/speech", json={"input": "Hi."}) as p:
                            out["new_speech"] = (p.status, (await p.json())["error"]["code"])
                        break
                await asyncio.sleep(0.05)
            out["seen"] = seen
            for _ in range(5):
                received += len(await r.content.read(8192))
            out["received_during_drain"] = received
            out["alive_during_drain"] = d.daemon.alive()
            r.close()  # the last stream goes: the drain ends
        return out

    out = asyncio.run(go())
    status, body = out["seen"][-1]
    assert out["before"] == 200
    assert status == 503 and body["status"] == "draining" and body["serving"] is False, out["seen"]
    assert out["new_speech"] == (503, "shutting_down")
    assert out["received_during_drain"] > 8192 and out["alive_during_drain"]
    assert d.daemon.proc.wait(timeout=30) == 0
