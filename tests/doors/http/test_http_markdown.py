"""Markdown on the HTTP door (issue 28): what a chat UI sends is read as Markdown by default
(``http.text_format: markdown``), the body's ``text_format`` overrides it."""

from __future__ import annotations

import aiohttp
import numpy as np
import pytest

from appliance.clients.client import Client
from tests.doors.http.conftest import HttpDaemon, decode

ZERO = {"noise_scale": 0.0, "noise_w": 0.0}


async def _pcm(d: HttpDaemon, body: dict[str, object]) -> tuple[int, bytes]:
    payload = {"model": "tts-1", "voice": "alloy", "response_format": "pcm", **ZERO, **body}
    async with aiohttp.ClientSession() as s:
        async with s.post(d.v1 + "/audio/speech", json=payload) as resp:
            return resp.status, await resp.read()


async def test_markdown_is_the_default_and_reads_as_the_plain_words(
    http_daemon: HttpDaemon,
) -> None:
    with Client(http_daemon.daemon.socket) as c:
        plain = np.frombuffer(c.synthesize_all("Sure! Turn on the lights.", **ZERO).audio, "<i2")
    status, data = await _pcm(http_daemon, {"input": "**Sure!** Turn on the *lights*."})
    assert status == 200
    audio, _rate = decode(data, "pcm")
    # The same clauses, so the very samples protocol v1 sends for the plain words.
    assert np.array_equal(audio, plain)
    status, raw = await _pcm(
        http_daemon, {"input": "**Sure!** Turn on the *lights*.", "text_format": "text"}
    )
    assert status == 200 and len(raw) > len(data)  # the asterisks are said


@pytest.mark.parametrize("value", ["rtf", 3, ""])
async def test_a_bad_text_format_is_refused(http_daemon: HttpDaemon, value: object) -> None:
    status, data = await _pcm(http_daemon, {"input": "Hi.", "text_format": value})
    assert status == 400 and b"text_format" in data
