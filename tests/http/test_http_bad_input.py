"""Every bad request gets its status and an OpenAI-style JSON error; the daemon serves on."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from tests.http.conftest import HttpDaemon

CASES: list[tuple[str, Any, int, str, str | None]] = [
    # name, body (bytes or JSON), status, code, param
    ("not json", b"{nope", 400, "bad_request", None),
    ("not an object", [1, 2], 400, "bad_request", None),
    ("no input", {"voice": "alloy"}, 400, "bad_request", "input"),
    ("input not a string", {"input": 5}, 400, "bad_request", "input"),
    ("empty input", {"input": "   "}, 400, "empty_text", None),
    ("text too long", {"input": "word " * 500}, 400, "text_too_long", None),
    ("unknown voice", {"input": "Hi.", "voice": "nobody"}, 400, "unknown_voice", "voice"),
    ("voice not a string", {"input": "Hi.", "voice": 3}, 400, "bad_request", "voice"),
    ("aac", {"input": "Hi.", "response_format": "aac"}, 400, "bad_request", "response_format"),
    (
        "unknown format",
        {"input": "Hi.", "response_format": "ogg"},
        400,
        "bad_request",
        "response_format",
    ),
    ("speed too high", {"input": "Hi.", "speed": 4.5}, 400, "bad_request", "speed"),
    ("speed too low", {"input": "Hi.", "speed": 0.1}, 400, "bad_request", "speed"),
    ("speed not a number", {"input": "Hi.", "speed": "fast"}, 400, "bad_request", "speed"),
    ("stream format", {"input": "Hi.", "stream_format": "ws"}, 400, "bad_request", "stream_format"),
    ("model not a string", {"input": "Hi.", "model": 1}, 400, "bad_request", "model"),
    ("noise out of range", {"input": "Hi.", "noise_scale": 3}, 400, "bad_request", "noise_scale"),
]


async def post(d: HttpDaemon, body: Any, **kw: Any) -> tuple[int, dict[str, Any], Any]:
    async with aiohttp.ClientSession() as s:
        if isinstance(body, bytes):
            kw["data"] = body
        else:
            kw["json"] = body
        async with s.post(d.v1 + "/audio/speech", **kw) as r:
            return r.status, dict(r.headers), await r.json(content_type=None)


@pytest.mark.parametrize(
    ("name", "body", "status", "code", "param"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_request_gets_status_and_json_error(
    http_daemon: HttpDaemon, name: str, body: Any, status: int, code: str, param: str | None
) -> None:
    got, headers, reply = asyncio.run(post(http_daemon, body))
    assert got == status, reply
    assert headers["Content-Type"].startswith("application/json")
    err = reply["error"]
    assert err["code"] == code and err["type"] == "invalid_request_error"
    assert err["param"] == param and err["message"]


def test_body_over_one_mib_is_413(http_daemon: HttpDaemon) -> None:
    big = b'{"input": "' + b"a" * (1024 * 1024) + b'"}'
    status, _h, reply = asyncio.run(post(http_daemon, big))
    assert status == 413 and reply["error"]["code"] == "frame_too_large"


def test_wrong_method_and_path(http_daemon: HttpDaemon) -> None:
    async def go() -> tuple[int, int]:
        async with aiohttp.ClientSession() as s:
            async with s.get(http_daemon.v1 + "/audio/speech") as r1:
                a = r1.status
            async with s.get(http_daemon.base + "/nothing") as r2:
                b = r2.status
                assert (await r2.json())["error"]["message"]
        return a, b

    assert asyncio.run(go()) == (405, 404)


def test_a_body_that_never_arrives_times_out(http_daemon: HttpDaemon) -> None:
    """Slowloris on the body: ``server.frame_timeout_s`` (10 s default), then 400."""

    async def go() -> tuple[bytes, float]:
        host, port = http_daemon.base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"input"'
        )
        t0 = time.monotonic()
        data = await asyncio.wait_for(reader.read(65536), 30)
        writer.close()
        return data, time.monotonic() - t0

    data, waited = asyncio.run(go())
    assert data.startswith(b"HTTP/1.1 400"), data[:100]
    assert b"did not arrive" in data
    assert 5 < waited < 25


def test_errors_are_counted_and_the_daemon_serves_on(http_daemon: HttpDaemon) -> None:
    async def go() -> tuple[str, int]:
        async with aiohttp.ClientSession() as s:
            for _ in range(3):
                async with s.post(http_daemon.v1 + "/audio/speech", data=b"{nope") as r:
                    assert r.status == 400
            async with s.get(http_daemon.base + "/metrics") as r:
                metrics = await r.text()
            async with s.post(
                http_daemon.v1 + "/audio/speech",
                json={"input": "Still here.", "response_format": "pcm"},
            ) as r:
                return metrics, len(await r.read())

    metrics, n = asyncio.run(go())
    assert 'ttsd_errors_total{code="bad_request"}' in metrics
    assert n > 10000
    assert http_daemon.daemon.alive()
