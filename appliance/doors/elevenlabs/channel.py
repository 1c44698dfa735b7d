"""The door frame's :class:`~appliance.doors.frame.session.Channel` over an aiohttp
WebSocket, and the one frame the door writes.

The door frames its own messages (:func:`text_frame`: a server's unmasked text frame, the
whole message in one) and writes them to the connection's transport at once, so that
the frame's output bound and too-slow rule see every byte the client has not read, as
on the stream doors.  aiohttp's WebSocketResponse keeps the rest of the WebSocket: the
handshake, reading and reassembling the client's messages, pings and the close
handshake.  The response is made without permessage-deflate (``compress=False``): every
message then goes out as written, and one written whole by the door cannot interleave
with one of aiohttp's (a ``pong``, the close).

Lifecycle: made once the upgrade is done; :meth:`WebSocketChannel.close` starts the close
handshake with :attr:`WebSocketChannel.closing`'s code (1000, or 1008 after a refusal),
and the handler awaits :meth:`WebSocketChannel.wait_closed` before it returns.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from appliance.doors.frame.session import Channel

DRAIN_POLL_S = 0.005
"""How often a writer over the bound looks at the transport's buffer again: aiohttp
offers no public wait for a WebSocket's transport to drain."""

_TEXT_FIN = 0x81


def text_frame(payload: bytes) -> bytes:
    """One whole text message as a server's frame (RFC 6455 §5.2: FIN, opcode 1, no mask)."""
    n = len(payload)
    if n < 126:
        head = bytes((_TEXT_FIN, n))
    elif n < 1 << 16:
        head = bytes((_TEXT_FIN, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((_TEXT_FIN, 127)) + n.to_bytes(8, "big")
    return head + payload


class WebSocketChannel(Channel):
    """Writes whole frames to the WebSocket's transport; closes with a code."""

    def __init__(self, ws: web.WebSocketResponse, transport: asyncio.BaseTransport) -> None:
        self.ws = ws
        self.transport = transport
        self.closing: tuple[int, str] = (1000, "")
        """The close code and reason this socket closes with (the wire sets 1008 when it
        refuses the connection)."""
        self._close: asyncio.Task[bool] | None = None

    def write(self, data: bytes) -> None:
        assert isinstance(self.transport, asyncio.WriteTransport)
        self.transport.write(data)

    async def drain(self) -> None:
        transport = self.transport
        assert isinstance(transport, asyncio.WriteTransport)
        while transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]:
            if transport.is_closing():
                raise ConnectionResetError("the connection closed")
            await asyncio.sleep(DRAIN_POLL_S)

    def is_closing(self) -> bool:
        return self.transport.is_closing() or self.ws.closed

    def close(self) -> None:
        if self._close is None and not self.ws.closed:
            code, reason = self.closing
            self._close = asyncio.ensure_future(
                self.ws.close(code=code, message=reason.encode()[:120])
            )

    async def refuse(self, payload: bytes) -> None:
        if not self.is_closing():
            self.write(payload)
        self.close()
        await self.wait_closed()

    async def wait_closed(self) -> None:
        """Until the close handshake is done (or the connection is gone)."""
        if self._close is not None:
            with contextlib.suppress(ConnectionError, OSError):
                await self._close
