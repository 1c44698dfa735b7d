"""API keys: required off loopback (the daemon refuses to start without one), compared
on every request but the health check."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from tests.conftest import DaemonFactory
from tests.doors.http.conftest import HttpDaemon, free_port, wait_http

KEY = "s3cret-key-for-tests"


@pytest.fixture(scope="module")
def keyed(daemon_factory: DaemonFactory, tmp_path_factory: pytest.TempPathFactory) -> HttpDaemon:
    """Listening on every address, the key read from a file."""
    key_file = tmp_path_factory.mktemp("key") / "key"
    key_file.write_text(KEY + "\n")
    port = free_port()
    daemon = daemon_factory({"http": {"listen": f"0.0.0.0:{port}", "api_key_file": str(key_file)}})
    base = f"http://127.0.0.1:{port}"
    wait_http(base, daemon)
    return HttpDaemon(daemon, base, KEY)


async def _status(url: str, headers: dict[str, str], post: bool = False) -> int:
    async with aiohttp.ClientSession() as s:
        async with s.request(
            "POST" if post else "GET",
            url,
            headers=headers,
            json={"input": "Hi.", "response_format": "pcm"} if post else None,
        ) as r:
            await r.read()
            return r.status


@pytest.mark.parametrize(
    "auth",
    ["", "Bearer wrong", "Bearer " + KEY[:-1], "Basic " + KEY, KEY, "Bearer " + KEY + "x"],
)
def test_missing_or_wrong_key_is_401(keyed: HttpDaemon, auth: str) -> None:
    headers = {"Authorization": auth} if auth else {}
    for path, post in (("/v1/audio/speech", True), ("/v1/models", False), ("/metrics", False)):
        assert asyncio.run(_status(keyed.base + path, headers, post)) == 401, (path, auth)


def test_right_key_is_served_and_healthz_needs_none(keyed: HttpDaemon) -> None:
    good = {"Authorization": "Bearer " + KEY}
    assert asyncio.run(_status(keyed.v1 + "/audio/speech", good, post=True)) == 200
    assert asyncio.run(_status(keyed.base + "/metrics", good)) == 200
    assert asyncio.run(_status(keyed.base + "/healthz", {})) == 200


def test_openai_client_with_and_without_the_key(keyed: HttpDaemon) -> None:
    ok = openai.OpenAI(base_url=keyed.v1, api_key=KEY, max_retries=0)
    with ok.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="Hello.", response_format="wav"
    ) as resp:
        assert resp.read()[:4] == b"RIFF"
    bad = openai.OpenAI(base_url=keyed.v1, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.audio.speech.create(model="tts-1", voice="alloy", input="Hello.")


def test_no_key_needed_on_loopback(http_daemon: HttpDaemon) -> None:
    assert asyncio.run(_status(http_daemon.v1 + "/models", {})) == 200


def failed_start(daemon_factory: DaemonFactory, config: dict[str, Any]) -> str:
    """Start a daemon that must exit 1; its log."""
    try:
        d = daemon_factory(config)
    except RuntimeError as exc:  # exited before its socket answered
        assert "exited with 1" in str(exc)
        return str(exc)
    # The socket answered in the moment before the HTTP door refused: wait for the exit.
    assert d.proc.wait(timeout=30) == 1
    return d.log()


def test_refuses_to_start_off_loopback_without_a_key(daemon_factory: DaemonFactory) -> None:
    log = failed_start(daemon_factory, {"http": {"listen": f"0.0.0.0:{free_port()}"}})
    assert "refusing to listen on 0.0.0.0" in log and "http.api_key" in log


def test_unreadable_key_file_stops_the_start(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    cfg = {"http": {"listen": f"0.0.0.0:{free_port()}", "api_key_file": str(tmp_path / "none")}}
    assert "api_key_file" in failed_start(daemon_factory, cfg)


@pytest.mark.parametrize(
    "token", [b"\xff\xfe\xfd", b"caf\xe9", KEY.encode() + b"\xe9", b"\xc3\xa9" * 8]
)
def test_a_token_that_is_not_utf8_or_not_ascii_is_401(keyed: HttpDaemon, token: bytes) -> None:
    """Issue 32, item 6: a non-UTF-8 or Latin-1 bearer token was a 500 (aiohttp's text
    page); it is a wrong key: 401 with the JSON error."""
    host, port = keyed.base.removeprefix("http://").rsplit(":", 1)

    async def go() -> bytes:
        reader, writer = await asyncio.open_connection(host, int(port))
        body = b'{"input": "Hi."}'
        writer.write(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + token + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        data = await asyncio.wait_for(reader.read(65536), 10)
        writer.close()
        return data

    data = asyncio.run(go())
    assert data.startswith(b"HTTP/1.1 401"), data[:200]
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"application/json" in head
    assert json.loads(body)["error"]["code"] == "unauthorized"
