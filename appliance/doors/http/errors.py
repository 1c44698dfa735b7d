"""The HTTP door's refusals in OpenAI's error shape, the one place that writes it.

What it adds to the frame: the frame's refusals and endings carry a
:class:`~appliance.errors.ServiceError`; here one becomes an HTTP status and body.

``{"error": {"message", "type", "code", "param"}}`` with the status the code maps to
(:data:`STATUS`); a refusal that names a wait carries ``retry_after_ms`` and a
``Retry-After`` header (whole seconds, at least one).  The same body goes out whether
aiohttp answers (:func:`error_response`) or the guard writes a whole response on a
connection aiohttp is not parsing (:func:`raw_response`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from appliance.errors import ErrorCode, ServiceError

STATUS = {
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.EMPTY_TEXT: 400,
    ErrorCode.TEXT_TOO_LONG: 400,
    ErrorCode.UNSUPPORTED_TEXT: 400,
    ErrorCode.UNKNOWN_VOICE: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FRAME_TOO_LARGE: 413,
    ErrorCode.BUSY: 429,
    ErrorCode.TOO_MANY_REQUESTS: 429,
    ErrorCode.TOO_MANY_CONNECTIONS: 503,
    ErrorCode.SHUTTING_DOWN: 503,
    ErrorCode.CLIENT_TOO_SLOW: 408,
    ErrorCode.INTERNAL: 500,
}

_REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class Closing(ServiceError):
    """A refusal after which the connection is closed (its body was not read whole)."""


def error_type(status: int) -> str:
    """OpenAI's ``type`` for a status."""
    if status >= 500:
        return "server_error"
    if status == 429:
        return "rate_limit_error"
    if status == 401:
        return "authentication_error"
    return "invalid_request_error"


def error_dict(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """The ``error`` object of a refusal."""
    return {"message": message, "type": error_type(status), "code": code, "param": param}


def error_response(exc: ServiceError, param: str | None = None) -> web.Response:
    """``exc`` as OpenAI's error, with its status (and ``Retry-After`` when it names one)."""
    status = STATUS.get(exc.code, 400)
    body = error_dict(status, exc.code, exc.message, param)
    headers = {}
    retry_ms = exc.extra.get("retry_after_ms")
    if retry_ms is not None:
        body["retry_after_ms"] = retry_ms
        headers["Retry-After"] = str(max(1, math.ceil(retry_ms / 1000)))
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return web.json_response({"error": body}, status=status, headers=headers)


def refusal(exc: ServiceError, param: str | None = None) -> web.Response:
    """:func:`error_response`, closing the connection after it for a :class:`Closing`."""
    resp = error_response(exc, param)
    if isinstance(exc, Closing):
        resp.force_close()
    return resp


def raw_response(status: int, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 response, for a connection aiohttp is not (or no longer) parsing."""
    body = json.dumps({"error": error_dict(status, code, message)}).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body
