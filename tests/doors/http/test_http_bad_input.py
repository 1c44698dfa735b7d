"""Every bad request gets its status and an OpenAI-style JSON error; the daemon serves on."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import aiohttp
import pytest

from tests.conftest import DaemonFactory
from tests.doors.http.conftest import HttpDaemon, start_http

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
    # Issue 32, item 6: these were 500 (aiohttp's text page, and a traceback at ERROR).
    ("nested 50 000 deep", b"[" * 50000 + b"]" * 50000, 400, "bad_request", None),
    (
        "input nested 50 000 deep",
        b'{"input": ' + b"[" * 50000 + b"]" * 50000 + b"}",
        400,
        "bad_request",
        None,
    ),
    (
        "speed of 401 digits",
        b'{"input": "Hi.", "speed": 1' + b"0" * 400 + b"}",
        400,
        "bad_request",
        "speed",
    ),
    (
        "noise of 401 digits",
        b'{"input": "Hi.", "noise_w": -1' + b"0" * 400 + b"}",
        400,
        "bad_request",
        "noise_w",
    ),
    (
        "speed of 5000 digits",
        b'{"input": "Hi.", "speed": 1' + b"0" * 5000 + b"}",
        400,
        "bad_request",
        None,
    ),
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
    """Slowloris on the body: ``limits.frame_timeout_s`` (10 s default), then 400 and the
    connection closed at once (issue 32, item 6: it was closed only 20.8 s in, after
    aiohttp had lingered 10 s more reading the body that never came)."""

    async def go() -> tuple[bytes, float, float]:
        host, port = http_daemon.base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"input"'
        )
        t0 = time.monotonic()
        data = await asyncio.wait_for(reader.read(65536), 30)
        answered = time.monotonic() - t0
        while piece := await asyncio.wait_for(reader.read(65536), 30):
            data += piece
        writer.close()
        return data, answered, time.monotonic() - t0

    data, answered, closed = asyncio.run(go())
    assert data.startswith(b"HTTP/1.1 400"), data[:100]
    assert b"did not arrive" in data
    assert 9 < answered < 13, answered
    assert closed < 13, closed


def test_malformed_requests_log_one_line_and_get_json(http_daemon: HttpDaemon) -> None:
    """Issue 32, item 6: each malformed request logged an 11-line traceback at ERROR."""
    host, port = http_daemon.base.removeprefix("http://").rsplit(":", 1)
    before = http_daemon.daemon.log()

    async def one(raw: bytes) -> bytes:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(raw)
        data = await asyncio.wait_for(reader.read(65536), 10)
        writer.close()
        return data

    async def go() -> list[bytes]:
        bad = [
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
        ]
        return [await one(raw) for raw in bad * 10]

    for data in asyncio.run(go()):
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.split(b" ")[1].startswith(b"4"), data[:200]  # (HTTP/1.0 when unparsed)
        assert json.loads(body)["error"]["code"] in ("bad_request", "frame_too_large"), body
    time.sleep(0.2)
    new = http_daemon.daemon.log()[len(before) :]
    assert "Traceback" not in new and "ERROR" not in new, new[-3000:]
    assert len([line for line in new.splitlines() if "appliance.doors.http" in line]) <= 6, new


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


def test_connections_over_the_cap_get_503(daemon_factory: DaemonFactory) -> None:
    """Connections count from accept.  Idle ones (no request yet) give way to a newcomer;
    when every slot is busy with a request, the newcomer gets 503 too_many_connections."""
    d = start_http(daemon_factory, {"max_connections": 2})
    host, port = d.base.removeprefix("http://").rsplit(":", 1)

    async def status(s: aiohttp.ClientSession) -> tuple[int, str | None]:
        async with s.get(d.v1 + "/models") as r:
            body = await r.json()
            return r.status, body.get("error", {}).get("code")

    async def go() -> tuple[tuple[int, str | None], ...]:
        idle = [await asyncio.open_connection(host, int(port)) for _ in range(2)]
        await asyncio.sleep(0.2)
        async with aiohttp.ClientSession() as s:
            past_idle = await status(s)
        busy = []
        for _ in range(2):  # requests whose bodies are still coming hold their slots
            _reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"
            )
            busy.append(writer)
        await asyncio.sleep(0.3)
        async with aiohttp.ClientSession() as s:
            over = await status(s)
        for writer in busy + [w for _r, w in idle]:
            writer.close()
        await asyncio.sleep(0.5)
        async with aiohttp.ClientSession() as s:
            after = await status(s)
        return past_idle, over, after

    past_idle, over, after = asyncio.run(go())
    assert past_idle == (200, None)
    assert over == (503, "too_many_connections")
    assert after == (200, None)
    d.daemon.stop()


def test_a_client_that_stops_reading_is_cut_off(http_daemon: HttpDaemon) -> None:
    """``limits.client_too_slow_s`` (2 s here) past the audio it holds: cut, counted, freed."""
    host, port = http_daemon.base.removeprefix("http://").rsplit(":", 1)
    text = "A client that never reads what it asked for must not hold the daemon. " * 25
    body = json.dumps({"input": text, "response_format": "pcm"}).encode()

    def errors() -> float:
        async def go() -> str:
            async with aiohttp.ClientSession() as s, s.get(http_daemon.base + "/metrics") as r:
                return await r.text()

        for line in asyncio.run(go()).splitlines():
            if line.startswith('ttsd_errors_total{code="client_too_slow"}'):
                return float(line.split()[-1])
        return 0.0

    before = errors()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
    sock.connect((host, int(port)))
    sock.sendall(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    deadline = time.monotonic() + 120
    while errors() < before + 1:
        assert time.monotonic() < deadline, "the slow client was never cut off"
        time.sleep(0.5)
    # Dropped, not flushed: what it did not read is discarded and the connection reset (a
    # plain close would leave the kernel retransmitting it to a client that never reads).
    sock.settimeout(30)
    with pytest.raises(ConnectionResetError):
        while sock.recv(65536):
            pass
    sock.close()
    assert http_daemon.daemon.alive()


def test_a_request_that_raises_gets_the_json_500(daemon_factory: DaemonFactory) -> None:
    """Issue 32, item 4: an exception the core did not turn into a ServiceError (here the
    frontend raising, through the test daemon's seam) was aiohttp's text page
    and a traceback at ERROR for every request; now the JSON error, internal."""
    d = start_http(daemon_factory, seams=["--frontend-fault", "FAULT-INJECTED"])

    async def go() -> list[tuple[int, Any]]:
        out = []
        async with aiohttp.ClientSession() as s:
            for text in ("Hello FAULT-INJECTED.", "Hello FAULT-INJECTED.", "Still served."):
                body = {"input": text, "response_format": "pcm"}
                async with s.post(d.v1 + "/audio/speech", json=body) as r:
                    data = await r.read()
                    out.append((r.status, json.loads(data) if r.status != 200 else len(data)))
        return out

    (s1, e1), (s2, _e2), (s3, n) = asyncio.run(go())
    assert (s1, s2, s3) == (500, 500, 200)
    assert e1["error"]["code"] == "internal" and e1["error"]["type"] == "server_error"
    assert n > 10000
    assert d.daemon.log().count("Traceback") == 1  # once, then one line per 10 s
    d.daemon.stop()
