"""Shutdown: while the core drains, /healthz says 503 and new speech is refused, the
stream in flight goes on, and the daemon exits when it is done."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import aiohttp

from tests.conftest import DaemonFactory
from tests.doors.http.conftest import start_http

LONG = "Every spring someone paints the chapel door blue, and nobody knows who. " * 40


def test_healthz_is_503_while_draining(daemon_factory: DaemonFactory) -> None:
    # No drain notice: the drain itself (the notice is tests/daemon/test_drain.py's).
    d = start_http(
        daemon_factory, cli_flag=True, limits={"shutdown_timeout_s": 60.0, "drain_notice_s": 0}
    )

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


def test_streams_cut_by_the_shutdown_say_so(daemon_factory: DaemonFactory) -> None:
    """Past ``shutdown_timeout_s``: an SSE stream ends with an ``error`` event
    (``shutting_down``); an audio stream is cut before its last chunk (truncated)."""
    d = start_http(daemon_factory, limits={"shutdown_timeout_s": 0.5})

    async def go() -> tuple[list[dict[str, Any]], str]:
        async with aiohttp.ClientSession() as s:
            sse = await s.post(
                d.v1 + "/audio/speech",
                json={"input": LONG, "response_format": "pcm", "stream_format": "sse"},
            )
            audio = await s.post(
                d.v1 + "/audio/speech", json={"input": LONG, "response_format": "pcm"}
            )
            assert sse.status == 200 and audio.status == 200
            await sse.content.readline()
            await audio.content.readexactly(4096)
            d.daemon.proc.send_signal(signal.SIGTERM)
            events = []
            async for line in sse.content:  # read slowly, like a player
                if line.startswith(b"data: "):
                    events.append(json.loads(line[6:]))
                await asyncio.sleep(0.01)
            try:
                while await audio.content.read(65536):
                    await asyncio.sleep(0.01)
                ending = "complete"
            except aiohttp.ClientPayloadError:
                ending = "truncated"
            return events, ending

    events, ending = asyncio.run(go())
    assert events[-1]["type"] == "error", events[-1]
    assert events[-1]["error"]["code"] == "shutting_down"
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    assert ending == "truncated"
    assert d.daemon.proc.wait(timeout=30) == 0
