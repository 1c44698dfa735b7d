"""The HTTP door's life: the aiohttp application, its listener, start, drain and close.

What it adds to :class:`~appliance.doors.frame.door.DoorBase` (settings read from the
daemon's one config, ``stopping``, ``shutting_down``):

- **Start**: the key (:func:`~appliance.doors.http.gate.load_key`: none off loopback is
  a ValueError, so the daemon does not start), the routes (speech, the small endpoints,
  ElevenLabs' WebSocket), aiohttp's own bounds (body ``http.max_body_bytes``, no
  decompression, head line and field sizes under ``http.max_header_bytes``,
  :data:`MAX_HEADERS` fields, keep-alive ``limits.idle_timeout_s``), and a TCP listener
  whose connections are :class:`~appliance.doors.http.guard.GuardedHandler`.
- **Drain** (``close_listener``): the listener stays open so that load balancers read
  ``/healthz`` = 503 rather than a refused connection; new speech and WebSockets are
  answered ``shutting_down``.  ``wait_idle`` waits for speech replies still being sent.
- **Close**: the listener, aiohttp's connections (2 s to finish), the encoding workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import web

from appliance.core.service import Service
from appliance.doors.elevenlabs.handler import ElevenLabsRoutes
from appliance.doors.frame.door import DoorBase
from appliance.doors.frame.ending import Report
from appliance.doors.http.gate import Gate, load_key
from appliance.doors.http.guard import Guard, listen
from appliance.doors.http.ops import OpsRoutes
from appliance.doors.http.speech import DOOR, SpeechRoutes
from appliance.doors.net import parse_listen, quiet_accept_errors
from appliance.doors.pace import PacedSends
from appliance.ops.config import HttpConfig

log = logging.getLogger("appliance.doors.http")

MAX_HEADERS = 32
"""Header fields in one request (OpenAI's clients send about ten, proxies add a few)."""

_CLOSE_WAIT_S = 2.0


class HttpDoor(DoorBase):
    """OpenAI's speech API (and the rest: :mod:`appliance.doors.http`) on ``http.listen``."""

    name = DOOR

    def __init__(self, service: Service, cfg: HttpConfig | None = None, listen: str | None = None):
        """``listen`` (else ``cfg``'s, else the config's ``http.listen``); every other
        setting is read from the daemon's one config (:class:`DoorBase`)."""
        super().__init__(service)
        self.listen = listen or (cfg or self.config.http).listen
        self.report = Report(service.record_error, log, DOOR)
        self.paced = PacedSends()
        self.speech = SpeechRoutes(self, self.report, self.paced)
        self.websockets = ElevenLabsRoutes(service, lambda: self.stopping, lambda: self.config)
        self.api_key: bytes | None = None
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._guard: Guard | None = None

    def _connections(self) -> int:
        return len(self._guard.held) if self._guard is not None else 0

    async def start(self) -> None:
        if not self.listen:
            raise ValueError("http: no listen address")
        host, port = parse_listen(self.listen, "http listen address")
        self.api_key = await load_key(self.config.http, host)
        handler_args = self._handler_args()
        self._runner = web.AppRunner(
            self._app(),
            handle_signals=False,
            shutdown_timeout=_CLOSE_WAIT_S,
            handler_cancellation=True,  # a disconnect cancels the handler: the stream stops
            **handler_args,
        )
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        quiet_accept_errors(asyncio.get_running_loop())
        self._guard = Guard(lambda: self.config.http, lambda: self.limits.reserved_fds, self.report)
        self._server = await listen(server, self._guard, host, port, **handler_args)
        self.port = self._server.sockets[0].getsockname()[1]
        self.service.add_door(DOOR, self._connections)
        log.info(
            "http: listening on %s:%d (%s)",
            host,
            self.port,
            "API key required" if self.api_key else "no API key: loopback only",
        )

    def _app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.config.http.max_body_bytes,
            middlewares=[Gate(self.api_key, self.report).middleware],
        )
        self.speech.add_to(app)
        OpsRoutes(self).add_to(app)
        self.websockets.add_to(app)  # ElevenLabs' input-streaming WebSocket (docs/agents.md)
        return app

    def _handler_args(self) -> dict[str, Any]:
        """aiohttp's connection handler's settings (the guard's handlers take them too)."""
        head = self.config.http.max_header_bytes
        return {
            "access_log": None,
            "keepalive_timeout": self.limits.idle_timeout_s or 75.0,
            "auto_decompress": False,  # no gzip bombs past the body cap
            # aiohttp's own head limits, under http.max_header_bytes (which the guard
            # applies to the whole head): they bound what it buffers of a pipelined head.
            "max_line_size": min(8190, head),
            "max_field_size": min(8190, head),
            "max_headers": MAX_HEADERS,
        }

    def close_listener(self) -> None:
        # Keep answering: /healthz says 503 while the core drains; speech says shutting_down.
        self.stopping = True

    async def wait_idle(self, deadline: float) -> None:
        await self.speech.wait_idle(deadline)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._server is not None:
            # At exit: a connection that will not finish closing has no one left to tell.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), _CLOSE_WAIT_S)
        self.speech.close()
