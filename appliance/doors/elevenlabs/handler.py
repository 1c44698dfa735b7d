"""The aiohttp side of the ElevenLabs WebSocket: routes, the connection cap, one socket's I/O.

Routes (added to the HTTP door's application, behind its key check, so the key rule is
HTTP's: a key beyond loopback, as ``Authorization: Bearer KEY`` or ElevenLabs'
``xi-api-key: KEY``)::

    GET /v1/text-to-speech/{voice_id}/stream-input
    GET /v1/text-to-speech/{voice_id}/multi-stream-input

:class:`Connection` is all the plumbing one socket has (so that it can move onto a shared
door frame): it reads messages (``limits.max_message_bytes`` each, aiohttp closes with
1009 beyond), hands them to the :class:`~appliance.doors.elevenlabs.session.Session`,
closes after ``inactivity_timeout`` without a message while no context is open, and writes
under the doors' one too-slow rule (:class:`~appliance.doors.net.Outbox`: a client that
reads nothing for ``limits.client_too_slow_s`` beyond the audio it holds is reset).  At
most ``elevenlabs.max_connections`` sockets at once (beyond: HTTP 503
``too_many_connections`` before the upgrade); while the daemon drains, 503
``shutting_down``.  A connection's contexts are cancelled when it goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from appliance.core.service import Service
from appliance.doors.elevenlabs.messages import BadMessage, Query, error_message
from appliance.doors.elevenlabs.session import Session
from appliance.doors.net import ClientTooSlow, Outbox
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config
from appliance.ops.logsetup import Throttle

log = logging.getLogger(__name__)

PATHS = (
    "/v1/text-to-speech/{voice_id}/stream-input",
    "/v1/text-to-speech/{voice_id}/multi-stream-input",
)
PREFIX = "/v1/text-to-speech/"
_THROTTLE = Throttle()


class ElevenLabsRoutes:
    """The WebSocket routes on the HTTP door's application, and their connection count."""

    def __init__(
        self, service: Service, stopping: Callable[[], bool], config: Callable[[], Config]
    ) -> None:
        self.service = service
        self._stopping = stopping  # the daemon stops (not the drain notice: that still serves)
        self._config = config
        self.open = 0

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(PATHS[0], self.single)
        app.router.add_get(PATHS[1], self.multi)

    async def single(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, multi=False)

    async def multi(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, multi=True)

    async def _serve(self, request: web.Request, multi: bool) -> web.StreamResponse:
        cfg = self._config()
        refusal = None
        if self._stopping():
            refusal = ServiceError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
        elif self.open >= cfg.elevenlabs.max_connections:
            refusal = ServiceError(ErrorCode.TOO_MANY_CONNECTIONS, "WebSocket limit reached")
        if refusal is not None:
            self.service.record_error(refusal.code)
            return web.json_response({"error": error_message(refusal)}, status=503)
        self.open += 1
        try:
            conn = Connection(self.service, self._config, multi)
            return await conn.serve(request)
        finally:
            self.open -= 1


class Connection:
    """One WebSocket: reads into its session, writes what the session sends."""

    def __init__(self, service: Service, config: Callable[[], Config], multi: bool) -> None:
        self.service = service
        self._config = config
        self.multi = multi
        self.ws: web.WebSocketResponse | None = None
        self.outbox: Outbox | None = None
        self._lock = asyncio.Lock()
        self.session: Session | None = None

    async def serve(self, request: web.Request) -> web.StreamResponse:
        limits = self._config().limits
        ws = self.ws = web.WebSocketResponse(max_msg_size=limits.max_message_bytes + 1024)
        await ws.prepare(request)
        transport = request.transport
        assert transport is not None
        self.outbox = Outbox(transport, lambda: self._config().limits)
        try:
            await self._session(request)
        except (ConnectionError, OSError):
            pass  # the client went away (or was too slow): its contexts are cancelled below
        finally:
            if self.session is not None:
                await self.session.close()
        if not transport.is_closing():
            closing = self.session.closing if self.session is not None else None
            await self._close(*(closing or (1000, "")))
        return ws

    async def _session(self, request: web.Request) -> None:
        cfg = self._config()
        try:
            query = Query.parse(
                request.match_info["voice_id"],
                request.query,
                cfg.elevenlabs.max_inactivity_timeout_s,
            )
            session = self.session = Session(
                self.service,
                query,
                self.multi,
                self.send,
                self._finished,
                lambda: self._config().elevenlabs,
                lambda: self._config().limits,
            )
            session.check_voice()
        except ServiceError as exc:
            await self.send(error_message(exc, closing=True))
            self.service.record_error(exc.code)
            self.session = None
            await self._close(1008, exc.code)
            return
        await self._read(session)

    async def _read(self, session: Session) -> None:
        assert self.ws is not None
        while session.closing is None and not session.done:
            wait = session.query.inactivity_s
            try:
                msg = await self.ws.receive(timeout=wait)
            except TimeoutError:
                if session.busy():
                    continue
                await session.refuse(
                    BadMessage(f"no message for {wait:g} s", ErrorCode.TEXT_TIMEOUT)
                )
                break
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                await session.receive(msg.data)
            elif msg.type == WSMsgType.ERROR:
                # aiohttp closed it (a message over the size cap: 1009): contexts end.
                if getattr(msg.data, "code", None) == WSCloseCode.MESSAGE_TOO_BIG:
                    self.service.record_error(ErrorCode.FRAME_TOO_LARGE)
                return
            else:
                return  # the client closed
        if session.done or session.closing is not None:
            await self._wait_contexts(session)

    async def _wait_contexts(self, session: Session) -> None:
        """After close_socket / end of stream: the open contexts finish first (their
        audio and isFinal), then the socket closes.  After a refusal: cancelled."""
        if session.closing is not None:
            await session.close()
        for ctx in list(session.running):
            if ctx.task is not None:
                await ctx.task

    async def send(self, msg: dict[str, Any], live: Callable[[], bool] | None = None) -> bool:
        """Write one message under the too-slow rule (a context's audio held is its grace);
        dropped when ``live`` no longer holds once its turn comes (barge-in)."""
        assert self.ws is not None and self.outbox is not None
        data = json.dumps(msg, separators=(",", ":"))
        async with self._lock:
            if self.ws.closed:
                raise ConnectionResetError("closed")
            if live is not None and not live():
                return False
            try:
                await self.outbox.guard(self.ws.send_str(data), self._grace())
            except ClientTooSlow:
                self.service.record_error(ErrorCode.CLIENT_TOO_SLOW)
                _THROTTLE.log(log, logging.WARNING, "slow", "elevenlabs: client_too_slow: reset")
                self.outbox.drop()  # its contexts end; the reader sees the socket go
                raise ConnectionResetError("client_too_slow") from None
        return True

    def _grace(self) -> float:
        if self.session is None:
            return 0.0
        return max((c.stream.buffer_s() for c in self.session.running), default=0.0)

    async def _finished(self) -> None:
        """Every context ended after close_socket / end of stream: close now (the reader,
        waiting for a message, then sees the close)."""
        with contextlib.suppress(ConnectionError, OSError):
            await self._close(1000, "")

    async def _close(self, code: int, reason: str) -> None:
        if self.ws is not None and not self.ws.closed:
            await self.ws.close(code=code, message=reason.encode()[:120])
