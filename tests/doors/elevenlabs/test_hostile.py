"""The ElevenLabs WebSocket against hostile and careless clients, through the real daemon:
each gets the documented answer and a client beside it is served meanwhile."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import os
import socket
import struct
import time
from typing import Any

import aiohttp
import pytest

from tests.conftest import DaemonFactory
from tests.doors.http.conftest import HttpDaemon, start_http

VOICE = "en_US-joe-medium"
KEY = "s3cret-agent-key"
LONG = "This sentence is here to make a good deal of audio for the client to read. " * 12


@pytest.fixture(scope="module")
def d(daemon_factory: DaemonFactory) -> HttpDaemon:
    return start_http(
        daemon_factory,
        {"api_key": KEY},
        limits={"client_too_slow_s": 2.0, "max_output_buffer_bytes": 65536},
        elevenlabs={"max_connections": 4, "max_contexts": 3, "max_messages_per_s": 1000},
    )


def url(d: HttpDaemon, path: str = "multi-stream-input", query: str = "pcm_16000") -> str:
    base = d.base.replace("http://", "ws://")
    return f"{base}/v1/text-to-speech/{VOICE}/{path}?output_format={query}"


HEADERS = {"xi-api-key": KEY}
TCP_CLOSE = 7
"""``tcpi_state`` of a connection the peer reset."""


async def served(d: HttpDaemon, text: str = "Hello there, I am still being served.") -> int:
    """A well-behaved client's audio bytes for ``text`` (one final, nothing else odd)."""
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url(d, "stream-input"), headers=HEADERS) as ws:
            await ws.send_str(json.dumps({"text": " "}))
            await ws.send_str(json.dumps({"text": text + " "}))
            await ws.send_str(json.dumps({"text": ""}))
            audio, finals = 0, 0
            async for msg in ws:
                m = json.loads(msg.data)
                audio += len(base64.b64decode(m.get("audio") or ""))
                finals += m.get("isFinal") is True
            assert finals == 1 and ws.close_code == 1000
            return audio


async def refused(d: HttpDaemon, messages: list[str | bytes], path: str = "multi-stream-input",
                  query: str = "pcm_16000") -> tuple[list[dict[str, Any]], int | None]:  # fmt: skip
    """Send ``messages``; the messages that came back and the close code."""
    got: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url(d, path, query), headers=HEADERS, max_msg_size=0) as ws:
            for m in messages:
                try:
                    await (ws.send_bytes(m) if isinstance(m, bytes) else ws.send_str(m))
                except (ConnectionError, aiohttp.ClientError):
                    break
            async with asyncio.timeout(30):
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        got.append(json.loads(msg.data))
            return got, ws.close_code


def errors(got: list[dict[str, Any]]) -> list[str]:
    return [m["error"] for m in got if "error" in m]


async def test_the_key_rule_is_http_s_with_elevenlabs_header_taken(d: HttpDaemon) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(url(d))
        assert err.value.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(url(d), headers={"xi-api-key": "wrong"})
        bearer = {"Authorization": f"Bearer {KEY}"}
        async with http.ws_connect(url(d), headers=bearer) as ws:
            await ws.send_str(json.dumps({"close_socket": True}))
            assert (await ws.receive()).type == aiohttp.WSMsgType.CLOSE
    assert await served(d) > 16000


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        (["{not json"], "bad_request"),
        (['{"text": " ", "colour": "red"}'], "bad_request"),
        ([b"\x00\xff"], "bad_request"),
        (['{"text": "' + "x" * 70000 + '"}'], None),  # over the size cap: 1009, no message
        (
            [json.dumps({"text": " ", "context_id": f"c{i}"}) for i in range(5)],
            "too_many_requests",
        ),
        (['{"text": ""}'] * 5000, "too_many_requests"),  # a flood of keep-alives
    ],
)
async def test_bad_input_gets_its_error_and_the_socket_closes_while_others_are_served(
    d: HttpDaemon, messages: list[str | bytes], error: str | None
) -> None:
    other = asyncio.ensure_future(served(d))
    got, code = await refused(d, messages)
    if error is None:
        assert code == 1009
    else:
        assert code == 1008 and errors(got) == [error], got
        # every context opened before the refusal still ends once
        opened = {f"c{i}" for i in range(5)}
        finals = [m["contextId"] for m in got if m.get("isFinal") is True]
        assert len(finals) == len(set(finals))
        assert set(finals) <= opened
    assert await other > 16000


async def test_an_unknown_voice_or_format_is_refused_not_defaulted(d: HttpDaemon) -> None:
    base = d.base.replace("http://", "ws://")
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            f"{base}/v1/text-to-speech/nobody/stream-input?output_format=pcm_16000",
            headers=HEADERS,
        ) as ws:
            msg = await ws.receive_json()
            assert msg["error"] == "unknown_voice" and msg["code"] == 1008
            assert (await ws.receive()).type == aiohttp.WSMsgType.CLOSE
            assert ws.close_code == 1008
    got, code = await refused(d, [], query="mp3_44100_128")
    assert code == 1008 and "pcm_16000" in got[0]["message"]


async def test_thousands_of_contexts_end_once_each_or_the_flood_is_refused(
    d: HttpDaemon,
) -> None:
    """2 000 contexts opened and closed as fast as the client can: each that was opened
    ends with exactly one isFinal, and either all of them do or the flood is refused
    (``too_many_requests``: too many messages a second, or too many contexts still ending);
    another client is served meanwhile."""
    n = 2000
    got: list[dict[str, Any]] = []
    other = asyncio.ensure_future(served(d))
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url(d), headers=HEADERS) as ws:

            async def read() -> None:
                async for m in ws:
                    got.append(json.loads(m.data))
                    if sum(1 for x in got if x.get("isFinal") is True) == n:
                        return

            reader = asyncio.ensure_future(read())
            with contextlib.suppress(ConnectionError, aiohttp.ClientError):
                for i in range(n):
                    await ws.send_str(json.dumps({"text": " ", "context_id": f"c{i}"}))
                    await ws.send_str(json.dumps({"context_id": f"c{i}", "close_context": True}))
            async with asyncio.timeout(60):
                await reader
            code = ws.close_code
    finals = [x["contextId"] for x in got if x.get("isFinal") is True]
    assert len(finals) == len(set(finals)) > 0
    if len(finals) < n:
        assert code == 1008 and errors(got)[-1] == "too_many_requests", (code, got[-3:])
    assert await other > 16000


def _frame(payload: bytes) -> bytes:
    """A masked client text frame (RFC 6455), for a raw socket that never reads."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x81]) + (
        bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    )
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def test_a_client_that_never_reads_is_cut_off_and_others_are_served(d: HttpDaemon) -> None:
    host, port = d.base.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        (
            f"GET /v1/text-to-speech/{VOICE}/stream-input?output_format=pcm_24000 HTTP/1.1\r\n"
            f"Host: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            f"xi-api-key: {KEY}\r\n\r\n"
        ).encode()
    )
    sock.sendall(_frame(b'{"text": " "}') + _frame(json.dumps({"text": LONG}).encode()))
    sock.sendall(_frame(b'{"text": ""}'))
    t0 = time.monotonic()
    assert await served(d) > 16000  # served while the other never reads
    # Cut off: the audio it holds (~60 s of text, produced ahead up to the watermark) plus
    # client_too_slow_s, then reset; the daemon is not left holding its output.
    # Looked at without reading (reading would let it go on): reset, the kernel says.
    deadline = t0 + 90
    gone = False
    while time.monotonic() < deadline and not gone:
        await asyncio.sleep(0.5)
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
        gone = err == errno.ECONNRESET or state == TCP_CLOSE
    sock.close()
    assert gone, "the never-reading client was not cut off"


async def test_sockets_beyond_the_cap_are_refused_before_the_upgrade(d: HttpDaemon) -> None:
    async with aiohttp.ClientSession() as http:
        held = [await http.ws_connect(url(d), headers=HEADERS) for _ in range(4)]
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(url(d), headers=HEADERS)
        assert err.value.status == 503
        await held.pop().close()
        await asyncio.sleep(0.2)
        assert await served(d) > 16000  # a slot came back
        for ws in held:
            await ws.close()


async def test_an_idle_socket_closes_after_its_inactivity_timeout(d: HttpDaemon) -> None:
    async with aiohttp.ClientSession() as http:
        t0 = time.monotonic()
        async with http.ws_connect(
            url(d, query="pcm_16000&inactivity_timeout=1"), headers=HEADERS
        ) as ws:
            msg = await ws.receive_json(timeout=10)
            assert msg["error"] == "text_timeout" and msg["code"] == 1008
            assert (await ws.receive(timeout=10)).type == aiohttp.WSMsgType.CLOSE
        assert 0.9 < time.monotonic() - t0 < 5
