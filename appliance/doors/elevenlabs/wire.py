"""What the ElevenLabs WebSocket adds to the door frame: its messages and their framing.

:class:`ElevenLabsWire` is the :class:`~appliance.doors.frame.session.WireProtocol` of
one socket: ``read`` is aiohttp's ``ws.receive()`` (whole messages, at most
``limits.max_message_bytes`` each: aiohttp closes with 1009 beyond), ``dispatch`` hands
each to the connection's :class:`~appliance.doors.elevenlabs.contexts.Contexts`, and
every message out is JSON in one text frame
(:func:`~appliance.doors.elevenlabs.channel.text_frame`), sent through the frame (its
output bound, its too-slow rule).  The frame does the rest: the read loop, the idle
timeout (the connection's ``inactivity_timeout``: then ``text_timeout``, 1008), each
context's one ending, and the close.

How the socket ends:

- the client closes: a disconnect, every context is cancelled;
- ``close_socket`` / end of stream: no more messages are read; the open contexts are
  spoken (the frame's half-close), then the socket closes (1000);
- a refused message: its error, every context cancelled and ended (``isFinal``), then
  the socket closes (1008).

Contexts read on while the output is over its bound (``reads_while_full``): a slow
reader's ``close_context`` still stops its audio at once; only the writers wait.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable
from typing import Any

from aiohttp import WSCloseCode, WSMsgType

from appliance.core.service import Service
from appliance.doors.elevenlabs.channel import WebSocketChannel, text_frame
from appliance.doors.elevenlabs.contexts import Contexts
from appliance.doors.elevenlabs.messages import (
    CLOSE_POLICY,
    BadMessage,
    Query,
    error_message,
    final_message,
)
from appliance.doors.frame.session import Session, WireProtocol
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config

log = logging.getLogger(__name__)


def message_bytes(msg: dict[str, Any]) -> bytes:
    """One message, framed."""
    return text_frame(json.dumps(msg, separators=(",", ":")).encode())


class ElevenLabsWire(WireProtocol[str | bytes]):
    """One socket's reads and messages (see the module doc)."""

    reads_while_full = True

    def __init__(
        self,
        session: Session,
        channel: WebSocketChannel,
        service: Service,
        query: Query,
        multi: bool,
        config: Callable[[], Config],
    ) -> None:
        super().__init__(session)
        self.channel = channel
        self.service = service
        self.contexts = Contexts(
            service,
            query,
            multi,
            self.send,
            session.requests,
            lambda: config().elevenlabs,
            lambda: config().limits,
        )
        self._client_closed = False

    async def read(self) -> str | bytes | None:
        """The next message; None once no more are read (see the module doc)."""
        c = self.contexts
        if c.closing is not None:
            self.channel.closing = c.closing
            self.session.requests.cancel_all("disconnect")
            return None
        if c.ending:
            return None
        msg = await self.channel.ws.receive()
        if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            data: str | bytes = msg.data
            return data
        if msg.type == WSMsgType.ERROR and getattr(msg.data, "code", None) == (
            WSCloseCode.MESSAGE_TOO_BIG
        ):
            self.service.record_error(ErrorCode.FRAME_TOO_LARGE)  # aiohttp closed it: 1009
        self._client_closed = True
        return None

    @property
    def partial(self) -> bool:
        return False  # aiohttp hands over whole messages only

    async def dispatch(self, msg: str | bytes) -> None:
        await self.contexts.receive(msg)

    def error_bytes(self, key: Hashable, exc: ServiceError) -> bytes:
        """The connection's error (it closes: 1008), or a context's, with its ``isFinal``
        (a context that failed outside its own handling still ends once)."""
        if key is None:
            self.channel.closing = (CLOSE_POLICY, exc.code)
            return message_bytes(error_message(exc, closing=True))
        cid = self.contexts.context_id(key)
        return message_bytes(error_message(exc, cid)) + message_bytes(final_message(cid))

    def dispatch_failed(self, msg: str | bytes, exc: ServiceError) -> None:
        """A bug on a message: said, and the socket closes as after a refusal."""
        self.session.write(self.error_bytes(None, exc))
        self.contexts.closing = self.channel.closing

    def idle_error(self) -> ServiceError | None:
        wait = self.contexts.query.inactivity_s
        return BadMessage(f"no message for {wait:g} s", ErrorCode.TEXT_TIMEOUT)

    def eof_is_disconnect(self) -> bool:
        return self._client_closed

    async def send(self, msg: dict[str, Any], live: Callable[[], bool] | None = None) -> bool:
        """One message, unless ``live`` no longer holds (a cancelled context's audio:
        barge-in); the audio the contexts' clients still hold is the too-slow grace."""
        if live is not None and not live():
            return False
        grace = max((r.stream.buffer_s() for r in self.session.requests if r.stream), default=0.0)
        await self.session.send(message_bytes(msg), grace)
        return True
