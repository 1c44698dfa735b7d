"""The HTTP door's connections before aiohttp has a request: counted, timed and capped.

What it adds to the frame: the frame's gate (:mod:`appliance.doors.frame.listener`) admits
connections it reads itself; here aiohttp parses, so the same rules (a slot from accept,
descriptors kept in reserve, the doors' one refusal) sit in aiohttp's connection handler.

Anyone who can connect reaches this code before any key is checked, so nothing here may
be held for long or cost much:

- **Counted from accept.**  A connection takes one of ``http.max_connections`` slots the
  moment it is accepted, not when its request is parsed, and file descriptors are kept
  for the Unix socket and the daemon's own files (``limits.reserved_fds``): a TCP
  connection that would leave fewer free is not kept.
- **Full door.**  The oldest connection still waiting for its request head (one that
  never passed the key check first) is closed to make room; only when every connection
  is busy with a request is the newcomer refused, with a 503 ``too_many_connections``.
  So idle and slowloris connections cannot keep ``/healthz`` or speech out.
- **Timed.**  A request head must begin within ``http.header_timeout_s`` (5 s) and keep
  coming (no gap longer than that), and be complete within ``http.head_timeout_s``
  (10 s) of its first byte; a connection that has not passed the key check waits no
  longer than ``header_timeout_s`` for its next request (after a 401 it is closed).
- **Capped.**  The request line and headers together may have ``http.max_header_bytes``
  (16 KiB): beyond, 431 and closed.  aiohttp's own per-line and header-count limits
  stay below that.
- **Quiet.**  A malformed request is answered with the OpenAI-style JSON error and logged
  in one line, at most one per kind every 10 s (the door's
  :class:`~appliance.doors.frame.ending.Report`).

A refused connection is answered, its writing side shut, and whatever it still sends is
read and dropped for up to a second (closing with its request unread would reset the
connection before it reads why); at most :data:`MAX_REFUSING` such connections at once,
beyond which a newcomer is closed at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import StreamReader, web
from aiohttp.web_request import BaseRequest

from appliance.doors.frame.ending import Report
from appliance.doors.http.errors import error_dict, raw_response
from appliance.doors.net import REFUSING_FDS, fds_short, refuse
from appliance.errors import ErrorCode
from appliance.ops.config import HttpConfig

MAX_REFUSING = REFUSING_FDS
"""Refused connections allowed to linger (≤ 1 s each) while their answer is read."""


def _peer(transport: asyncio.BaseTransport | None) -> str:
    name = transport.get_extra_info("peername") if transport is not None else None
    return str(name[0]) if isinstance(name, tuple) and name else "?"


class Guard:
    """The door's connections: who holds a slot, who waits for a head, who is refused."""

    def __init__(
        self, cfg: Callable[[], HttpConfig], reserved_fds: Callable[[], int], report: Report
    ) -> None:
        self.cfg = cfg
        self.reserved_fds = reserved_fds
        self.report = report
        self.held: set[GuardedHandler] = set()
        self.waiting: dict[GuardedHandler, None] = {}
        """Connections waiting for a head that never passed the key check, oldest first."""
        self.idle: dict[GuardedHandler, None] = {}
        """Connections that did pass it, waiting for their next request, oldest first."""
        self.refusing = 0

    def room(self, handler: GuardedHandler, transport: asyncio.Transport) -> bool:
        """Whether ``handler`` may have a slot (closing the oldest idle one if need be)."""
        sock = transport.get_extra_info("socket")
        # The Unix socket's reserved connections and our own files keep their descriptors.
        short = fds_short(sock, self.reserved_fds())
        if len(self.held) < self.cfg().max_connections and not short:
            return True
        victim = next(iter(self.waiting), None) or next(iter(self.idle), None)
        if victim is None:
            self.report.throttled(
                logging.WARNING,
                "full",
                "http: %s: refusing a connection (%d open)",
                "file descriptors kept in reserve" if short else "connection limit reached",
                len(self.held),
            )
            return False
        self.report.throttled(
            logging.INFO,
            "evict",
            "http: door full: closing the connection that waited longest for a request",
        )
        victim.force_close()  # its connection_lost gives its slot back
        self.release(victim)
        return True

    def release(self, handler: GuardedHandler) -> None:
        self.held.discard(handler)
        self.waiting.pop(handler, None)
        self.idle.pop(handler, None)


class GuardedHandler(web.RequestHandler):
    """aiohttp's connection handler with the guard's rules applied before it parses."""

    def __init__(self, manager: web.Server, guard: Guard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self.authenticated = False
        """A request on this connection passed the key check (set by the door)."""
        self._refused = False
        self._handed = False
        """Handed to aiohttp (connection_made passed on); a refused newcomer never is."""
        self._head_open = False
        self._head_bytes = 0
        self._head_deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._body_left: StreamReader | None = None
        """The body of the request just answered, still being read (lingering)."""

    # -- the connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        guard = self._guard
        if not guard.room(self, transport):
            self._refused = True
            if guard.refusing >= MAX_REFUSING:
                transport.abort()
                return
            self._refuse_now(
                transport, 503, ErrorCode.TOO_MANY_CONNECTIONS, "connection limit reached"
            )
            return
        guard.held.add(self)
        self._handed = True
        super().connection_made(transport)
        self._open_head()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_timer()
        self._guard.release(self)
        if self._handed:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped until the lingering close
        before = self._request_count
        super().data_received(data)
        if self._body_left is not None and self._body_left.is_eof():
            self._body_left = None
            if self._request_count == before:
                self._open_head()
                return  # (the rest of this read, if any, was body)
        if not self._head_open or not data:
            return
        if self._request_count > before:
            self._close_head()  # (aiohttp's line and header-count limits bounded it)
            return
        # No head completed: every byte of this read was head.
        self._head_bytes += len(data)
        if self._head_bytes > self._guard.cfg().max_header_bytes:
            self._refuse_head(431, "the request head is too large")
            return
        self._arm_head_timer(first=self._head_deadline is None)

    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        result = await super().finish_response(request, resp, start_time)
        if result[0].keep_alive and not result[1] and not self._messages:
            # The next request's head is awaited (keep-alive) once this one's body is in:
            # what aiohttp still reads of it (lingering) is not head.
            if request.content.is_eof():
                self._open_head()
            else:
                self._body_left = request.content
        return result

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """aiohttp's answer to a request it could not parse (or a handler's bug): the
        documented JSON error, one log line (not a traceback at ERROR)."""
        code = ErrorCode.INTERNAL if status >= 500 else ErrorCode.BAD_REQUEST
        text = (message or (str(exc) if exc else "") or "malformed request").splitlines()[0]
        self._guard.report.throttled(
            logging.ERROR if status >= 500 else logging.INFO,
            f"malformed:{status}",
            "http: %d from %s: %s",
            status,
            request.remote,
            text[:200],
            exc_info=exc if status >= 500 else None,
        )
        # A parser's message says what was wrong with the request; a bug's stays in the log.
        shown = "internal error" if status >= 500 else text[:200]
        body = json.dumps({"error": error_dict(status, code, shown)}).encode()
        resp = web.Response(status=status, body=body, content_type="application/json")
        resp.force_close()
        return resp

    def no_linger(self) -> None:
        """Close right after this response, without reading what is left of the body
        first (aiohttp would wait up to 10 s more for a body that never came)."""
        self._lingering_time = 0.0

    # -- the request head

    def _open_head(self) -> None:
        if self._head_open or self._refused or self.transport is None:
            return
        self._head_open = True
        self._head_bytes = 0
        self._head_deadline = None
        guard = self._guard
        guard.waiting.pop(self, None)
        guard.idle.pop(self, None)
        (guard.idle if self.authenticated else guard.waiting)[self] = None
        self._stop_timer()
        if not self.authenticated:
            # Idle and never past the key check: close it soon (aiohttp's keep-alive
            # timeout looks after the others).
            self._timer = self._loop.call_later(guard.cfg().header_timeout_s, self._head_late)

    def _close_head(self) -> None:
        self._head_open = False
        self._stop_timer()
        self._guard.waiting.pop(self, None)
        self._guard.idle.pop(self, None)

    def _arm_head_timer(self, first: bool) -> None:
        cfg = self._guard.cfg()
        now = self._loop.time()
        if first:
            self._head_deadline = now + cfg.head_timeout_s
        assert self._head_deadline is not None
        self._stop_timer()
        self._timer = self._loop.call_at(
            min(now + cfg.header_timeout_s, self._head_deadline), self._head_late
        )

    def _head_late(self) -> None:
        self._timer = None
        if not self._head_open or self.transport is None:
            return
        if self._head_bytes == 0:
            self._guard.report.log.debug("http: closing a connection that sent no request")
            self.force_close()
            return
        self._refuse_head(408, "the request head did not arrive in time")

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- refusing

    def _refuse_head(self, status: int, message: str) -> None:
        self._guard.report.throttled(
            logging.INFO,
            f"head:{status}",
            "http: %d from %s: %s",
            status,
            _peer(self.transport),
            message,
        )
        transport = self.transport
        self._close_head()
        self._refused = True
        self._guard.release(self)
        if transport is None:
            return
        code = ErrorCode.FRAME_TOO_LARGE if status == 431 else ErrorCode.BAD_REQUEST
        self._refuse_now(transport, status, code, message)

    def _refuse_now(self, transport: asyncio.Transport, status: int, code: str, msg: str) -> None:
        """Answer, shut the writing side, drop what comes for a second, then close (the
        doors' one refusal: :func:`appliance.doors.net.refuse`)."""
        guard = self._guard
        guard.refusing += 1

        def done(_: asyncio.Future[None]) -> None:
            guard.refusing -= 1

        task = asyncio.ensure_future(refuse(transport, raw_response(status, code, msg)))
        task.add_done_callback(done)


async def listen(
    server: web.Server, guard: Guard, host: str, port: int, **handler_args: Any
) -> asyncio.Server:
    """A TCP listener on ``host:port``; each connection a :class:`GuardedHandler` of
    aiohttp's ``server`` (``handler_args``: aiohttp's connection settings)."""
    loop = asyncio.get_running_loop()

    def handler() -> GuardedHandler:
        return GuardedHandler(server, guard, loop=loop, **handler_args)

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return await loop.create_server(
        handler, host, port, family=family, reuse_address=True, backlog=128
    )
