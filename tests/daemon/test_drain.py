"""SIGTERM behind a balancer (docs/scale-out.md): for ``limits.drain_notice_s`` the box
still serves but says ``drain`` (agent) and 503 (``/healthz``, ``/readyz``); then it stops
taking requests (``shutting_down``), lets the stream in flight end whole, and exits 0.  A
second SIGTERM cuts the notice short.  Paced frames still on the clock at the drain's end
get their ``shutting_down`` on time, on v1 and HTTP, and newcomers on v1 and Wyoming are
told ``shutting_down`` rather than refused."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from typing import Any

import aiohttp
import msgpack
from wyoming.client import AsyncUnixClient
from wyoming.tts import Synthesize

from bench.rig import free_port
from tests.conftest import DaemonFactory
from tests.wire import Wire

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


PACED = "The ferry leaves the harbour at nine, and the gulls follow it out to sea. " * 4
"""About 18 s of audio: the core has made it all (the pacer holds up to 10 s ahead) while
seconds of its frames are still to go out on the clock (on a box that makes audio at least
a few times faster than real time)."""


async def _v1_events(path: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of one request on a connection of its own, up to the connection's end
    (its terminal event, or EOF); each with ``at``, its arrival on the monotonic clock."""
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(msgpack.packb(request))
    unpacker = msgpack.Unpacker(raw=False)
    events: list[dict[str, Any]] = []
    try:
        while data := await reader.read(65536):
            unpacker.feed(data)
            for ev in unpacker:
                events.append({**ev, "at": time.monotonic()})
                if ev["event"] in ("end", "error", "pong"):
                    return events
    finally:
        writer.close()
    return events


async def _sse_events(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.post(base + "/v1/audio/speech", json=body) as r:
        assert r.status == 200, await r.text()
        events = []
        try:
            async for line in r.content:
                if line.startswith(b"data: "):
                    events.append({**json.loads(line[6:]), "at": time.monotonic()})
        except aiohttp.ClientPayloadError:
            events.append({"type": "truncated", "at": time.monotonic()})
        return events


async def _wyoming_newcomer(path: str) -> Any:
    """What a Wyoming client that connects now is told (its first event's data)."""
    client = AsyncUnixClient(path, read_timeout=10.0)
    async with client:
        await client.write_event(Synthesize(text="Hello.").event())
        ev = await client.read_event()
        return None if ev is None else (ev.type, ev.data)


def _streams_in_the_core(path: str) -> int:
    with Wire(path) as w:
        return int(w.call({"op": "health", "id": 0})["streams"])


def test_the_drain_ends_paced_frames_on_time_and_tells_newcomers(
    daemon_factory: DaemonFactory, tmp_path: Any
) -> None:
    """Issue 42 item 13.  A paced v1 stream whose core stream was done got EOF when the
    drain ended (no ``end``, no ``error``: v1's ``wait_idle`` did not wait for its frames);
    a paced HTTP response made the drain 11.1 s against 2 + 5; new v1 clients during the
    drain were refused by the kernel.  Now frames go out until notice + timeout, then each
    paced request gets ``shutting_down``; the daemon exits soon after; newcomers on v1 and
    Wyoming are answered ``shutting_down``."""
    notice, timeout = 0.5, 1.0
    http, wyoming = free_port(), str(tmp_path / "wyoming.sock")
    d = daemon_factory(
        {
            "http": {"listen": f"127.0.0.1:{http}"},
            "wyoming": {"uri": f"unix://{wyoming}"},
            "limits": {"drain_notice_s": notice, "shutdown_timeout_s": timeout},
            "scheduler": {"admission_max_load": 64},  # a loaded box still admits both
        }
    )
    base = f"http://127.0.0.1:{http}"

    async def go() -> dict[str, Any]:
        v1 = asyncio.create_task(
            _v1_events(d.socket, {"op": "synthesize", "id": 1, "text": PACED, "pace_ms": 20})
        )
        sse = asyncio.create_task(
            _sse_events(
                base,
                {"input": PACED, "response_format": "pcm", "stream_format": "sse", "pace_ms": 20},
            )
        )
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.5)
        while await loop.run_in_executor(None, _streams_in_the_core, d.socket):
            await asyncio.sleep(0.1)  # both made; their frames still go out on the clock
        assert not v1.done() and not sse.done(), (
            "audio made slower than real time: re-run",
            sse.done() and sse.result()[-1],
        )
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(notice + 0.3)
        out: dict[str, Any] = {"t0": t0}
        out["v1_newcomer"] = await _v1_events(d.socket, {"op": "ping", "id": 9})
        out["wyoming_newcomer"] = await _wyoming_newcomer(wyoming)
        out["v1"], out["sse"] = await v1, await sse
        await loop.run_in_executor(None, d.proc.wait, 30)
        out["exit_s"] = time.monotonic() - t0
        return out

    out = asyncio.run(go())
    t0, bound = out["t0"], notice + timeout
    v1_last, sse_last = out["v1"][-1], out["sse"][-1]
    assert v1_last["event"] != "end", (
        "the frames ran out before the deadline: this box made the audio about as slowly as"
        " it plays (re-run on a quieter one)",
        v1_last["stats"].get("rtf"),
    )
    assert v1_last["event"] == "error" and v1_last["code"] == "shutting_down", v1_last
    assert [e["event"] for e in out["v1"]].count("error") == 1
    assert sse_last["type"] == "error" and sse_last["error"]["code"] == "shutting_down", sse_last
    # Frames went on through the notice and the drain, and the end came on time.
    for last, frames in ((v1_last, out["v1"][1:-1]), (sse_last, out["sse"][:-1])):
        assert frames[-1]["at"] - t0 > bound - 0.5, (frames[-1]["at"] - t0, bound)
        assert bound - 0.2 < last["at"] - t0 < bound + 1.0, (last["at"] - t0, bound)
    newcomer = out["v1_newcomer"]
    assert [(e["event"], e.get("code")) for e in newcomer] == [("error", "shutting_down")]
    assert out["wyoming_newcomer"][0] == "error", out["wyoming_newcomer"]
    assert out["wyoming_newcomer"][1]["code"] == "shutting_down"
    assert d.proc.returncode == 0
    assert out["exit_s"] < bound + 1.5, out["exit_s"]
    assert "Traceback" not in d.log()
