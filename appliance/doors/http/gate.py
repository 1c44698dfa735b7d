"""Each HTTP request before its handler: the API key, aiohttp's refusals as JSON, the
boundary for a bug, and the body's bounds.

What it adds to the frame: the frame's gate admits a connection once; an HTTP
connection carries many requests, so the key is checked on each (aiohttp's middleware):

- **Key.**  Off loopback a key is required (``http.api_key`` or the first line of
  ``http.api_key_file``, read at start); each request's ``Authorization: Bearer`` token
  (``xi-api-key`` on the ElevenLabs WebSocket's paths) is compared in constant time.  A
  wrong or missing key is 401 and the connection is closed.  ``/healthz`` and
  ``/readyz`` need none (a load balancer's check).
- **Refusals.**  aiohttp's own (404, 405, …) go out as OpenAI's JSON error.
- **A bug** on a request's path is the JSON 500 ``internal``, logged by the door's
  :class:`~appliance.doors.frame.ending.Report` (a traceback once, then one line per
  10 s) and the connection closed.
- **Body.**  At most ``http.max_body_bytes`` (413 ``frame_too_large``), arriving within
  ``limits.frame_timeout_s`` (400); either refusal closes the connection, since the rest
  of the body would be read as the next request's head.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from appliance.doors.elevenlabs.handler import PREFIX as WS_PREFIX
from appliance.doors.frame.ending import Report
from appliance.doors.http.errors import Closing, error_response
from appliance.doors.http.guard import GuardedHandler
from appliance.doors.net import is_loopback
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import HttpConfig

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without the key: what a load balancer's check reads."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def load_key(cfg: HttpConfig, host: str) -> bytes | None:
    """The key requests must carry (None: none, on loopback only); ValueError when the
    key file cannot be read, the key is empty, or ``host`` is off loopback without one."""
    key = cfg.api_key
    if key is None and cfg.api_key_file:
        read = functools.partial(Path(cfg.api_key_file).read_text, "utf-8")
        try:
            text = await asyncio.get_running_loop().run_in_executor(None, read)
        except OSError as exc:
            raise ValueError(
                f"http.api_key_file {cfg.api_key_file}: {exc.strerror or exc}"
            ) from exc
        key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if key is not None and not key:
        raise ValueError("http: the API key is empty")
    if key is None and not is_loopback(host):
        raise ValueError(
            f"http: refusing to listen on {cfg.listen} without an API key: set"
            " http.api_key or http.api_key_file, or listen on 127.0.0.1"
        )
    return key.encode() if key is not None else None


def key_ok(request: web.Request, key: bytes) -> bool:
    """Constant-time comparison of the bearer token with the key.  Header bytes that
    are not UTF-8 (or Latin-1 ones) arrive as surrogates: compared as the bytes they
    were, so they are just a wrong key (401), not an encoding error."""
    auth = request.headers.get("Authorization", "")
    scheme, _, token = auth.partition(" ")
    if request.path.startswith(WS_PREFIX) and "xi-api-key" in request.headers:
        scheme, token = "bearer", request.headers["xi-api-key"]  # ElevenLabs' header
    try:
        raw = token.strip().encode("utf-8", "surrogateescape")
    except UnicodeError:
        return False
    return hmac.compare_digest(raw, key) and scheme.lower() == "bearer"


class Gate:
    """The door's middleware: the key, then the handler, its refusals and its bugs."""

    def __init__(self, key: bytes | None, report: Report) -> None:
        self.key = key
        self.report = report

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # (The connection cap is applied at accept: appliance.doors.http.guard.)
        if self.key is not None and request.path not in OPEN_PATHS:
            if not key_ok(request, self.key):
                self.report.count(ErrorCode.UNAUTHORIZED)
                refused = error_response(
                    ServiceError(ErrorCode.UNAUTHORIZED, "missing or wrong API key")
                )
                refused.force_close()  # no second try on this connection
                return refused
        if isinstance(request.protocol, GuardedHandler) and request.path not in OPEN_PATHS:
            request.protocol.authenticated = True  # may wait as long as any keep-alive
        try:
            return await _refusals_as_json(request, handler)
        except (asyncio.CancelledError, ConnectionError):
            raise  # the client went away: aiohttp knows what to do
        except Exception as exc:  # the boundary of one request: a bug ends it, not the door
            where = f"{request.method} {_route(request)}"
            failed = self.report.internal(exc, where, str(request.remote))
            r = error_response(ServiceError(failed.code, "internal error"))
            r.force_close()
            return r


def _route(request: web.Request) -> str:
    """The route's template (one log kind per route, whatever path a client sends)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "?"


async def _refusals_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPNotFound:
        r = error_response(ServiceError(ErrorCode.BAD_REQUEST, "no such endpoint"))
        r.set_status(404)
        return r
    except web.HTTPMethodNotAllowed as exc:
        r = error_response(ServiceError(ErrorCode.BAD_REQUEST, f"method {request.method}"))
        r.set_status(405)
        r.headers["Allow"] = ",".join(exc.allowed_methods)
        return r
    except web.HTTPException as exc:  # any other refusal aiohttp raises, as JSON
        code = ErrorCode.INTERNAL if exc.status >= 500 else ErrorCode.BAD_REQUEST
        r = error_response(ServiceError(code, exc.reason))
        r.set_status(exc.status)
        return r


async def read_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """The request's body: at most ``limit`` bytes, whole within ``timeout`` s; else
    :class:`~appliance.doors.http.errors.Closing` (answered, then the connection closed)."""
    if request.content_length is not None and request.content_length > limit:
        raise Closing(ErrorCode.FRAME_TOO_LARGE, f"the body may be at most {limit} bytes")
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise Closing(ErrorCode.FRAME_TOO_LARGE, f"the body may be at most {limit} bytes") from None
    except TimeoutError:
        if isinstance(request.protocol, GuardedHandler):
            # Closed with the answer: aiohttp would read 10 s more for the body first.
            request.protocol.no_linger()
        raise Closing(
            ErrorCode.BAD_REQUEST, f"the body did not arrive within {timeout:g} s"
        ) from None
