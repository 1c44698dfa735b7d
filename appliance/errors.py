"""Errors every door shares: a code from the documented list and a message.

The service core raises :class:`ServiceError`; each door maps it onto its own
wire (protocol v1's ``error`` event, Wyoming's ``error``, an HTTP status and body).
"""

from __future__ import annotations

from typing import Any


class ErrorCode:
    BAD_REQUEST = "bad_request"
    UNKNOWN_OP = "unknown_op"
    EMPTY_TEXT = "empty_text"
    TEXT_TOO_LONG = "text_too_long"
    TEXT_TIMEOUT = "text_timeout"
    UNSUPPORTED_TEXT = "unsupported_text"
    UNKNOWN_VOICE = "unknown_voice"
    DUPLICATE_ID = "duplicate_id"
    BUSY = "busy"
    NO_AUDIO_DEVICE = "no_audio_device"
    FRAME_TOO_LARGE = "frame_too_large"
    UNAUTHORIZED = "unauthorized"
    CLIENT_TOO_SLOW = "client_too_slow"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    TOO_MANY_CONNECTIONS_FOR_USER = "too_many_connections_for_user"
    TOO_MANY_REQUESTS = "too_many_requests"
    SHUTTING_DOWN = "shutting_down"
    INTERNAL = "internal"


class ServiceError(Exception):
    """A request that cannot be served (or can no longer be): code, message, extras."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra
