"""ElevenLabs' input-streaming WebSocket messages, parsed and checked in one place.

What a connection says once (the path's ``voice_id`` and the query) is a :class:`Query`;
what a client sends after that is a :class:`ClientMessage` each; what goes back is built
by :func:`audio_message`, :func:`final_message` and :func:`error_message`.  Nothing here
touches a socket or the service core.

Fields ElevenLabs defines that mean nothing to ttsd (``stability``, ``similarity_boost``,
``chunk_length_schedule``, pronunciation dictionaries, …) are accepted and ignored;
``voice_settings.speed`` is the one mapped (to the request's ``speed``).  A field ElevenLabs
does not define is refused (:class:`BadMessage`), as is a wrong type: docs/agents.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from appliance.errors import ErrorCode, ServiceError
from appliance.speech import SPEED, within

OUTPUT_FORMATS: dict[str, tuple[str, int]] = {
    "pcm_8000": ("s16le", 8000),
    "pcm_16000": ("s16le", 16000),
    "pcm_22050": ("s16le", 22050),
    "pcm_24000": ("s16le", 24000),
    "pcm_44100": ("s16le", 44100),
    "pcm_48000": ("s16le", 48000),
    "ulaw_8000": ("mulaw", 8000),
    "alaw_8000": ("alaw", 8000),
}
"""``output_format`` → (sample format, rate): raw mono, as ElevenLabs sends them."""

DEFAULT_INACTIVITY_S = 20.0
"""ElevenLabs' default ``inactivity_timeout``."""
MAX_CONTEXT_ID = 128
"""Characters of a ``context_id``."""
CLOSE_POLICY = 1008
"""The WebSocket close code ElevenLabs closes with on a refused message (policy violation)."""

_MESSAGE_FIELDS = frozenset(
    {
        "text",
        "voice_settings",
        "generation_config",
        "generator_config",
        "xi_api_key",
        "authorization",
        "flush",
        "try_trigger_generation",
        "pronunciation_dictionary_locators",
        "context_id",
        "close_context",
        "close_socket",
    }
)
"""Every field ElevenLabs' input-streaming messages define (the others are refused)."""


class BadMessage(ServiceError):
    """A message or query ttsd refuses: the error message is sent, the socket closed."""

    def __init__(self, message: str, code: str = ErrorCode.BAD_REQUEST) -> None:
        super().__init__(code, message)


def _flag(value: str | None, key: str) -> bool | None:
    if value is None:
        return None
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise BadMessage(f"'{key}' must be true or false")


@dataclass(frozen=True)
class Query:
    """The path's voice and the query string of one connection."""

    voice: str
    speaker: str | int | None
    output_format: str = ""
    inactivity_s: float = DEFAULT_INACTIVITY_S
    sync_alignment: bool = False
    auto_mode: bool | None = None
    model_id: str | None = None
    """Accepted and ignored: ttsd has one model per voice."""
    visemes: bool = False
    """ttsd's extension ``visemes=true``: each audio message carries its mouth shapes."""

    @property
    def sample_format(self) -> str:
        return OUTPUT_FORMATS[self.output_format][0]

    @property
    def rate(self) -> int:
        return OUTPUT_FORMATS[self.output_format][1]

    @classmethod
    def parse(cls, voice_id: str, query: Mapping[str, str], max_inactivity_s: float) -> Query:
        """``voice_id`` is a ttsd voice (``NAME`` or ``NAME:SPEAKER``); the query's
        ``output_format`` must be one of :data:`OUTPUT_FORMATS` (ElevenLabs' default, MP3,
        is not streamed here); ``inactivity_timeout`` is capped at ``max_inactivity_s``."""
        name, _, spk = voice_id.partition(":")
        if not name or len(voice_id) > 256:
            raise BadMessage("the path must name a voice: /v1/text-to-speech/VOICE/...")
        speaker: str | int | None = (int(spk) if spk.isdigit() else spk) if spk else None
        fmt = query.get("output_format")
        if fmt not in OUTPUT_FORMATS:
            shown = f"{fmt[:32]!r} is not served" if fmt else "no 'output_format'"
            raise BadMessage(f"{shown}: use one of {', '.join(OUTPUT_FORMATS)}")
        timeout = DEFAULT_INACTIVITY_S
        raw = query.get("inactivity_timeout")
        if raw is not None:
            try:
                timeout = float(raw)
            except ValueError:
                raise BadMessage("'inactivity_timeout' must be a number of seconds") from None
            if not math.isfinite(timeout) or timeout <= 0:
                raise BadMessage("'inactivity_timeout' must be a positive number of seconds")
        return cls(
            name,
            speaker,
            fmt,
            min(timeout, max_inactivity_s),
            bool(_flag(query.get("sync_alignment"), "sync_alignment")),
            _flag(query.get("auto_mode"), "auto_mode"),
            query.get("model_id"),
            bool(_flag(query.get("visemes"), "visemes")),
        )


@dataclass(frozen=True)
class ClientMessage:
    """One message from the client, its fields checked."""

    text: str | None = None
    context_id: str | None = None
    flush: bool = False
    close_context: bool = False
    close_socket: bool = False
    speed: float | None = None
    """``voice_settings.speed``, the one voice setting ttsd applies."""

    @classmethod
    def parse(cls, raw: str | bytes) -> ClientMessage:
        try:
            d = json.loads(raw)
        except (ValueError, RecursionError):
            raise BadMessage("the message is not valid JSON") from None
        if not isinstance(d, dict):
            raise BadMessage("a message must be a JSON object")
        unknown = sorted(k for k in d if k not in _MESSAGE_FIELDS)
        if unknown:
            raise BadMessage(f"unknown field {unknown[0][:64]!r}")
        text = d.get("text")
        if text is not None and not isinstance(text, str):
            raise BadMessage("'text' must be a string")
        ctx = d.get("context_id")
        if ctx is not None and (not isinstance(ctx, str) or not 0 < len(ctx) <= MAX_CONTEXT_ID):
            raise BadMessage(f"'context_id' must be a string of 1–{MAX_CONTEXT_ID} characters")
        flags = {k: _bool(d, k) for k in ("flush", "close_context", "close_socket")}
        return cls(text, ctx, speed=_speed(d.get("voice_settings")), **flags)


def _bool(d: dict[str, Any], key: str) -> bool:
    value = d.get(key, False)
    if not isinstance(value, bool):
        raise BadMessage(f"'{key}' must be true or false")
    return value


def _speed(settings: Any) -> float | None:
    if settings is None:
        return None
    if not isinstance(settings, dict):
        raise BadMessage("'voice_settings' must be an object")
    speed = settings.get("speed")
    if speed is None:
        return None
    if isinstance(speed, bool) or not isinstance(speed, int | float):
        raise BadMessage("'voice_settings.speed' must be a number")
    if not within("speed", speed):
        lo, hi = SPEED
        raise BadMessage(f"'voice_settings.speed' must be within {lo:g}–{hi:g}")
    return float(speed)


# ---------------------------------------------------------------- out


Alignment = dict[str, list[Any]]


def audio_message(
    audio_b64: str,
    alignment: Alignment | None,
    context_id: str | None,
    visemes: dict[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """ElevenLabs' audio message; ``contextId`` on multi-stream connections only;
    ``visemes`` (ttsd's extension) only when the connection asked for them."""
    msg: dict[str, Any] = {
        "audio": audio_b64,
        "isFinal": None,
        "normalizedAlignment": alignment,
        "alignment": alignment,
    }
    if context_id is not None:
        msg["contextId"] = context_id
    if visemes is not None:
        msg["visemes"] = visemes
    return msg


SENT_TEXT_SPAN = "sentTextSpan"
"""ttsd's extension on the ``isFinal`` of an interrupted context (ElevenLabs' clients read
the fields they know and pass over the rest): ``[start, end)`` of the context's text (all
its ``text`` joined, as sent) that the audio sent reaches; ``[0, 0]`` when none was sent."""


def final_message(
    context_id: str | None, sent_text_span: tuple[int, int] | None = None
) -> dict[str, Any]:
    """``isFinal``; after an interruption with :data:`SENT_TEXT_SPAN`."""
    msg: dict[str, Any] = {"isFinal": True}
    if context_id is not None:
        msg["contextId"] = context_id
    if sent_text_span is not None:
        msg[SENT_TEXT_SPAN] = list(sent_text_span)
    return msg


def error_message(
    exc: ServiceError, context_id: str | None = None, closing: bool = False
) -> dict[str, Any]:
    """ElevenLabs' error shape (``message``, ``error``, ``code``: the close code that
    follows, when the socket closes), ``contextId`` when one context failed."""
    msg: dict[str, Any] = {"message": exc.message, "error": exc.code}
    if closing:
        msg["code"] = CLOSE_POLICY
    if context_id is not None:
        msg["contextId"] = context_id
    return msg
