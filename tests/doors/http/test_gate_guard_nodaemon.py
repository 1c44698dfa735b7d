"""The HTTP door's guard (each connection) and gate (each request), without a daemon.

A real aiohttp application on a loopback port, with the door's own parts in front of it
(:func:`~appliance.doors.http.guard.listen`, :class:`~appliance.doors.http.gate.Gate`,
:func:`~appliance.doors.http.gate.read_body`) and small handlers of the test's own: what
a client meets before any speech is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from appliance.doors.frame.ending import Report
from appliance.doors.http.errors import refusal
from appliance.doors.http.gate import Gate, load_key, read_body
from appliance.doors.http.guard import Guard, listen
from appliance.errors import ServiceError
from appliance.ops.config import HttpConfig

KEY = b"s3cret"


@dataclasses.dataclass
class Served:
    base: str
    port: int
    counted: list[str]
    guard: Guard


async def _echo(request: web.Request) -> web.Response:
    try:
        raw = await read_body(request, 1024, 0.3)
    except ServiceError as exc:
        return refusal(exc)
    return web.json_response({"bytes": len(raw)})


async def _bug(request: web.Request) -> web.Response:
    raise RuntimeError("a bug on the request's path")


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@contextlib.asynccontextmanager
async def served(cfg: HttpConfig, key: bytes | None = None) -> AsyncIterator[Served]:
    counted: list[str] = []
    report = Report(counted.append, logging.getLogger("appliance.doors.http"), "http")
    app = web.Application(middlewares=[Gate(key, report).middleware])
    app.router.add_post("/echo", _echo)
    app.router.add_get("/bug", _bug)
    app.router.add_get("/healthz", _ok)
    app.router.add_get("/v1/text-to-speech/v/stream-input", _ok)
    app.router.add_post("/v1/audio/speech", _ok)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    assert runner.server is not None
    guard = Guard(lambda: cfg, lambda: 0, report)
    server = await listen(runner.server, guard, "127.0.0.1", 0, access_log=None)
    port = server.sockets[0].getsockname()[1]
    try:
        yield Served(f"http://127.0.0.1:{port}", port, counted, guard)
    finally:
        server.close()
        await runner.cleanup()


async def raw_exchange(port: int, data: bytes, wait_s: float = 5.0) -> bytes:
    """Send ``data``, then read until the server closes (or ``wait_s``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    out = b""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(wait_s):
            while chunk := await reader.read(65536):
                out += chunk
    writer.close()
    return out


def test_the_key_is_checked_on_each_request_but_not_on_the_health_checks() -> None:
    async def go() -> None:
        async with served(HttpConfig(), KEY) as s, aiohttp.ClientSession() as c:
            async with c.post(s.base + "/v1/audio/speech") as r:
                err = (await r.json())["error"]
                assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"
                assert (err["code"], err["type"]) == ("unauthorized", "authentication_error")
                assert r.headers.get("Connection", "").lower() == "close"  # no second try
            for auth in ("Bearer nope", f"Basic {KEY.decode()}", f"Bearer {KEY.decode()}x"):
                async with c.post(s.base + "/v1/audio/speech", headers={"Authorization": auth}):
                    pass
            bearer = {"Authorization": f"Bearer {KEY.decode()}"}
            async with c.post(s.base + "/v1/audio/speech", headers=bearer) as r:
                assert r.status == 200
            async with c.get(s.base + "/healthz") as r:
                assert r.status == 200
            xi = {"xi-api-key": KEY.decode()}
            async with c.get(s.base + "/v1/text-to-speech/v/stream-input", headers=xi) as r:
                assert r.status == 200  # ElevenLabs' header on its own paths
            async with c.post(s.base + "/v1/audio/speech", headers=xi) as r:
                assert r.status == 401  # and only there
            assert s.counted == ["unauthorized"] * 5
        # Header bytes that are not UTF-8 are a wrong key, not an encoding error.
        async with served(HttpConfig(), KEY) as s:
            head = b"GET /bug HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n"
            assert (await raw_exchange(s.port, head)).startswith(b"HTTP/1.1 401")

    asyncio.run(go())


def test_a_bug_is_a_json_500_counted_with_one_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        async with served(HttpConfig()) as s, aiohttp.ClientSession() as c:
            for _ in range(3):
                async with c.get(s.base + "/bug") as r:
                    err = (await r.json())["error"]
                    assert r.status == 500 and r.headers.get("Connection", "").lower() == "close"
                    assert (err["code"], err["type"]) == ("internal", "server_error")
                    assert "bug" not in err["message"]  # the bug stays in the log
            async with c.get(s.base + "/healthz") as r:
                assert r.status == 200  # and the door serves on
            assert s.counted == ["internal"] * 3

    with caplog.at_level(logging.INFO, logger="appliance.doors.http"):
        asyncio.run(go())
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "GET /bug" in tracebacks[0].getMessage()


def test_aiohttp_refusals_are_json() -> None:
    async def go() -> None:
        async with served(HttpConfig()) as s, aiohttp.ClientSession() as c:
            async with c.get(s.base + "/nowhere") as r:
                assert r.status == 404 and (await r.json())["error"]["code"] == "bad_request"
            async with c.delete(s.base + "/echo") as r:
                assert r.status == 405 and r.headers["Allow"] == "POST"
                assert (await r.json())["error"]["message"] == "method DELETE"

    asyncio.run(go())


def test_the_body_is_bounded_in_size_and_time() -> None:
    async def go() -> None:
        async with served(HttpConfig()) as s, aiohttp.ClientSession() as c:
            async with c.post(s.base + "/echo", data=b"x" * 1000) as r:
                assert (await r.json()) == {"bytes": 1000}
            async with c.post(s.base + "/echo", data=b"x" * 2000) as r:
                assert r.status == 413 and (await r.json())["error"]["code"] == "frame_too_large"
                assert r.headers.get("Connection", "").lower() == "close"
            # Ten bytes of a hundred, then nothing: answered after the 0.3 s, and closed.
            late = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
            t0 = asyncio.get_running_loop().time()
            out = await raw_exchange(s.port, late)
            assert asyncio.get_running_loop().time() - t0 < 4.0  # not aiohttp's 10 s linger
            head, _, body = out.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400")
            assert "did not arrive within 0.3 s" in json.loads(body)["error"]["message"]

    asyncio.run(go())


def test_a_full_door_closes_the_connection_that_waited_longest() -> None:
    async def go() -> None:
        async with served(HttpConfig(max_connections=1)) as s:
            idle_r, idle_w = await asyncio.open_connection("127.0.0.1", s.port)
            await asyncio.sleep(0.1)
            assert len(s.guard.held) == 1
            out = await raw_exchange(s.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 1.0)
            assert out.startswith(b"HTTP/1.1 200"), out[:200]
            assert await asyncio.wait_for(idle_r.read(), 5) == b""  # the idle one went
            idle_w.close()

    asyncio.run(go())


def test_a_head_too_large_or_too_slow_is_refused_and_a_silent_one_closed() -> None:
    cfg = HttpConfig(max_header_bytes=1024, header_timeout_s=0.3, head_timeout_s=1.0)

    async def go() -> None:
        async with served(cfg) as s:
            big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 2000
            out = await raw_exchange(s.port, big)
            assert out.startswith(b"HTTP/1.1 431"), out[:200]
            assert json.loads(out.partition(b"\r\n\r\n")[2])["error"]["code"] == "frame_too_large"
            out = await raw_exchange(s.port, b"GET /healthz HTTP/1.1\r\nHo")
            assert out.startswith(b"HTTP/1.1 408"), out[:200]
            t0 = asyncio.get_running_loop().time()
            assert await raw_exchange(s.port, b"") == b""  # nothing sent: closed, unanswered
            assert asyncio.get_running_loop().time() - t0 < 4.0

    asyncio.run(go())


def test_the_key_is_loaded_once_and_required_off_loopback(tmp_path: Path) -> None:
    keyfile = tmp_path / "key"
    keyfile.write_text("  from-file  \nsecond line\n")
    cfg = HttpConfig(listen="0.0.0.0:8880", api_key_file=str(keyfile))
    assert asyncio.run(load_key(cfg, "0.0.0.0")) == b"from-file"
    assert asyncio.run(load_key(HttpConfig(api_key="k"), "0.0.0.0")) == b"k"
    assert asyncio.run(load_key(HttpConfig(), "127.0.0.1")) is None
    keyfile.write_text("\n")
    for bad, says in (
        (cfg, "the API key is empty"),
        (HttpConfig(api_key_file=str(tmp_path / "none")), "http.api_key_file"),
        (HttpConfig(listen="0.0.0.0:8880"), "without an API key"),
    ):
        with pytest.raises(ValueError, match=says):
            asyncio.run(load_key(bad, "0.0.0.0"))
