"""The aiohttp side of the ElevenLabs WebSocket: routes, the connection cap, the upgrade.

Routes (added to the HTTP door's application, behind its key check, so the key rule is
HTTP's: a key beyond loopback, as ``Authorization: Bearer KEY`` or ElevenLabs'
``xi-api-key: KEY``)::

    GET /v1/text-to-speech/{voice_id}/stream-input
    GET /v1/text-to-speech/{voice_id}/multi-stream-input

At most ``elevenlabs.max_connections`` sockets at once (beyond: HTTP 503
``too_many_connections`` before the upgrade); while the daemon drains, 503
``shutting_down``.  After the upgrade, a query or voice that cannot be served is its
error and a close (1008); otherwise the socket is one door-frame
:class:`~appliance.doors.frame.session.Session` over a
:class:`~appliance.doors.elevenlabs.channel.WebSocketChannel`, its messages the
:class:`~appliance.doors.elevenlabs.wire.ElevenLabsWire`'s.  Its idle timeout is the
connection's ``inactivity_timeout``; the other bounds are the doors' ``limits``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import replace

from aiohttp import web

from appliance.core.service import Service
from appliance.doors.elevenlabs.channel import WebSocketChannel
from appliance.doors.elevenlabs.messages import CLOSE_POLICY, Query, error_message
from appliance.doors.elevenlabs.wire import ElevenLabsWire, message_bytes
from appliance.doors.frame.ending import Report
from appliance.doors.frame.session import Session
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config

log = logging.getLogger(__name__)
DOOR = "elevenlabs"

PATHS = (
    "/v1/text-to-speech/{voice_id}/stream-input",
    "/v1/text-to-speech/{voice_id}/multi-stream-input",
)
PREFIX = "/v1/text-to-speech/"


class ElevenLabsRoutes:
    """The WebSocket routes on the HTTP door's application, and their connection count."""

    def __init__(
        self, service: Service, stopping: Callable[[], bool], config: Callable[[], Config]
    ) -> None:
        self.service = service
        self._stopping = stopping  # the daemon stops (not the drain notice: that still serves)
        self._config = config
        self.open = 0
        self._report = Report(service.record_error, log, DOOR)
        self._numbers = itertools.count(1)

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
            return await self._upgrade(request, multi)
        finally:
            self.open -= 1

    async def _upgrade(self, request: web.Request, multi: bool) -> web.StreamResponse:
        cfg = self._config()
        ws = web.WebSocketResponse(max_msg_size=cfg.limits.max_message_bytes + 1024, compress=False)
        await ws.prepare(request)
        assert request.transport is not None
        channel = WebSocketChannel(ws, request.transport)
        try:
            query = Query.parse(
                request.match_info["voice_id"],
                request.query,
                cfg.elevenlabs.max_inactivity_timeout_s,
            )
            self.service.resolve_voice(query.voice, query.speaker)
        except ServiceError as exc:
            self.service.record_error(exc.code)
            channel.closing = (CLOSE_POLICY, exc.code)
            await channel.refuse(message_bytes(error_message(exc, closing=True)))
            return ws
        session = Session(
            channel,
            lambda: replace(self._config().limits, idle_timeout_s=query.inactivity_s),
            self._report,
            next(self._numbers),
            lambda s: ElevenLabsWire(s, channel, self.service, query, multi, self._config),
        )
        await session.serve()
        await channel.wait_closed()
        return ws
