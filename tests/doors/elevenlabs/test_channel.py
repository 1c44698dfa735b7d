"""The door's own WebSocket frames are the frames aiohttp's writer makes (no socket)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import WSMsgType
from aiohttp.http import WebSocketWriter

from appliance.doors.elevenlabs.channel import text_frame


class _Capture(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.data = b""

    def write(self, data: Any) -> None:
        self.data += bytes(data)

    def is_closing(self) -> bool:
        return False


class _Protocol:
    _paused = False


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 300_000])
def test_a_text_frame_is_what_aiohttp_would_write(size: int) -> None:
    payload = bytes(i % 251 for i in range(size))

    async def aiohttp_frame() -> bytes:
        transport = _Capture()
        writer = WebSocketWriter(_Protocol(), transport, limit=1 << 30)  # type: ignore[arg-type]
        await writer.send_frame(payload, WSMsgType.TEXT)
        return transport.data

    assert text_frame(payload) == asyncio.run(aiohttp_frame())
