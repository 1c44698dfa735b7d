"""SIGTERM behind a balancer (docs/scale-out.md): for ``limits.drain_notice_s`` the box
still serves but says ``drain`` (agent) and 503 (``/healthz``, ``/readyz``); then it stops
taking requests (``shutting_down``), lets the stream in flight end whole, and exits 0.  A
second SIGTERM cuts the notice short."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from typing import Any

import aiohttp

from bench.rig import free_port
from tests.conftest import DaemonFactory

LONG = "The ferry leaves the harbour at nine, and the gulls follow it out to sea. " * 2
"""About 9 s of audio, sent paced (``pace_ms``): in flight past the notice however fast the
machine makes it (unpaced, a quiet machine made it all into the client's socket buffer
before the notice ended, and the daemon then had nothing to drain)."""
NOTICE_S = 3.0


def agent_line(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        return s.recv(256).decode("ascii")


def start(daemon_factory: DaemonFactory, notice_s: float) -> tuple[Any, str, int]:
    agent, http = free_port(), free_port()
    d = daemon_factory(
        {
            "agent": {"listen": f"127.0.0.1:{agent}"},
            "http": {"listen": f"127.0.0.1:{http}"},
            "limits": {"drain_notice_s": notice_s, "shutdown_timeout_s": 60.0},
        }
    )
    return d, f"http://127.0.0.1:{http}", agent


async def status_of(base: str, path: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(base + path) as r:
        return r.status


async def speak(base: str, text: str) -> tuple[int, str, int]:
    """(status, error code or "", audio bytes) of one whole request."""
    async with aiohttp.ClientSession() as s:
        body = {"input": text, "response_format": "pcm"}
        async with s.post(base + "/v1/audio/speech", json=body) as r:
            if r.status != 200:
                return r.status, (await r.json())["error"]["code"], 0
            return 200, "", len(await r.read())


def test_the_notice_then_the_drain(daemon_factory: DaemonFactory) -> None:
    d, base, agent = start(daemon_factory, NOTICE_S)
    assert agent_line(agent).startswith("up ready")

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with aiohttp.ClientSession() as s:
            body = {"input": LONG, "response_format": "pcm", "pace_ms": 20}
            stream = await s.post(base + "/v1/audio/speech", json=body)
            assert stream.status == 200
            got = len(await stream.content.readexactly(4096))
            d.proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            await asyncio.sleep(0.3)
            loop = asyncio.get_running_loop()
            out["notice"] = {
                "agent": await loop.run_in_executor(None, agent_line, agent),
                "healthz": await status_of(base, "/healthz"),
                "readyz": await status_of(base, "/readyz"),
                "speech": await speak(base, "Still here."),
                "within_s": time.monotonic() - t0,
            }
            await asyncio.sleep(max(0.0, NOTICE_S + 0.5 - (time.monotonic() - t0)))
            out["after"] = {
                "agent": await loop.run_in_executor(None, agent_line, agent),
                "speech": await speak(base, "Too late."),
            }
            got += len(await stream.read())  # the stream in flight ends whole
            out["stream_bytes"] = got
        return out

    out = asyncio.run(go())
    n = out["notice"]
    assert n["within_s"] < NOTICE_S, out  # else the checks below were not in the notice
    assert n["agent"] == "up drain\n" and n["healthz"] == 503 and n["readyz"] == 503, out
    assert n["speech"][0] == 200 and n["speech"][2] > 0, out  # still served meanwhile
    assert out["after"]["agent"] == "up drain\n", out
    assert out["after"]["speech"][:2] == (503, "shutting_down"), out
    assert out["stream_bytes"] > 22050 * 2, out  # seconds of audio, not the first chunk
    assert d.proc.wait(timeout=60) == 0


def test_a_second_sigterm_cuts_the_notice_short(daemon_factory: DaemonFactory) -> None:
    d, _, agent = start(daemon_factory, 60.0)
    d.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while agent_line(agent) != "up drain\n":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 15.0  # not the 60 s notice
