"""The HTTP door: OpenAI's ``POST /v1/audio/speech``, voices, models, health, metrics.

A :class:`~appliance.core.service.Door` on the service core, served by aiohttp (an asyncio
HTTP server that streams responses; no HTTP parsing here).  Endpoints:

- ``POST /v1/audio/speech`` — ``{model, input, voice, response_format, speed,
  stream_format}`` as OpenAI takes them; audio streams out chunk by chunk (chunked
  transfer) or as Server-Sent Events (``speech.audio.delta`` / ``speech.audio.done``);
  with ``"stream": false``, a whole file (:mod:`appliance.doors.whole`).
- ``GET /v1/audio/voices``, ``GET /v1/models`` — for clients that list them.
- ``GET /healthz`` — 200 while serving, 503 while draining or when nothing can serve.
- ``GET /readyz`` — 200 while the box would take a new stream now, 503 while it is full
  (admission would say ``busy``), starting or draining: a balancer's HTTP check
  (:mod:`appliance.core.capacity`, docs/scale-out.md).  Like ``/healthz``, no key.
- ``GET /metrics`` — the daemon's Prometheus registry (:mod:`appliance.ops.metrics`).
- ``GET /v1/text-to-speech/{voice}/stream-input`` and ``.../multi-stream-input`` —
  ElevenLabs' input-streaming WebSocket (:mod:`appliance.doors.elevenlabs`; its key may
  come as ``xi-api-key``).

Limits as protocol v1's: a key is required off loopback (constant-time compare), the
body is capped (413), the body must arrive within ``limits.frame_timeout_s``, and a client
that stops reading is ended after ``limits.client_too_slow_s`` beyond the audio it holds.
What a connection may hold before its request is known (counted from accept, head timeouts
and size, descriptors kept for the Unix socket) is :mod:`appliance.doors.httpguard`'s.  Every
refusal is OpenAI's JSON error; a bug on a request's path is a JSON 500 ``internal``.  A
client that disconnects cancels its stream at once (aiohttp cancels the handler; the
stream is cancelled, not abandoned).

While the daemon drains (``close_listener``) the listener stays open so that load
balancers read ``/healthz`` = 503 rather than a refused connection; new speech is
answered 503 ``shutting_down``.  ``close`` shuts it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hmac
import io
import json
import logging
import math
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from appliance.core.capacity import Capacity, capacity_of
from appliance.core.service import Service, Stream, StreamResult
from appliance.doors import captions, whole
from appliance.doors.elevenlabs.handler import PREFIX as WS_PREFIX
from appliance.doors.elevenlabs.handler import ElevenLabsRoutes
from appliance.doors.formats import (
    FORMATS,
    RAW_FORMATS,
    Encoder,
    FileOut,
    PcmOut,
    SoundfileOut,
    make_encoder,
)
from appliance.doors.httpguard import Guard, GuardedHandler
from appliance.doors.net import (
    ClientTooSlow,
    Outbox,
    drop_connection,
    is_loopback,
    parse_listen,
    quiet_accept_errors,
)
from appliance.doors.pace import PACE_MS, PacedFrame, PacedSends, Pacer
from appliance.doors.pcm import G711_RATE
from appliance.errors import ErrorCode, ServiceError
from appliance.model.stretch import VOICE_SPEED_LIMIT
from appliance.model.stretch import available as stretch_available
from appliance.ops.config import HttpConfig, LimitsConfig
from appliance.ops.logsetup import Throttle
from appliance.speech import TEXT_FORMATS, Chunk, SpeechRequest, Viseme, Word

log = logging.getLogger(__name__)

DOOR = "http"
_OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without the key: what a load balancer's check reads."""

OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip
OPENAI_SPEED = (0.25, 4.0)
TTSD_SPEED = (0.5, 4.0)
"""Past 1.25× (``VOICE_SPEED_LIMIT``) the voice is time-stretched (libsonic); without
libsonic, clamped there."""
STREAM_FORMATS = ("audio", "sse")
RESPONSE_FORMATS = (*FORMATS, *captions.CAPTION_FORMATS)
"""Every ``response_format`` taken: the one list a refusal names."""
MODEL_ID = "ttsd"

T = TypeVar("T")

_MAX_HEADERS = 32
"""Header fields in one request (OpenAI's clients send about ten, proxies add a few)."""

_THROTTLE = Throttle()

_ENCODE_THREADS = 2
"""MP3 and Opus cost a few ms per chunk: off the event loop, beside the inference workers."""

_STATUS = {
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


# ---------------------------------------------------------------- request / errors


def error_response(exc: ServiceError, param: str | None = None) -> web.Response:
    """OpenAI's error shape: ``{"error": {"message", "type", "code", "param"}}``."""
    status = _STATUS.get(exc.code, 400)
    kind = (
        "server_error"
        if status >= 500
        else "rate_limit_error"
        if status == 429
        else "authentication_error"
        if status == 401
        else "invalid_request_error"
    )
    body: dict[str, Any] = {"message": exc.message, "type": kind, "code": exc.code, "param": param}
    headers = {}
    retry_ms = exc.extra.get("retry_after_ms")
    if retry_ms is not None:
        body["retry_after_ms"] = retry_ms
        headers["Retry-After"] = str(max(1, math.ceil(retry_ms / 1000)))
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return web.json_response({"error": body}, status=status, headers=headers)


class _Closing(ServiceError):
    """A refusal after which the connection is closed (its body was not read whole)."""


class BadField(ServiceError):
    def __init__(self, param: str, message: str, code: str = ErrorCode.BAD_REQUEST) -> None:
        super().__init__(code, message)
        self.param = param


@dataclass(frozen=True)
class SpeechBody:
    """The JSON body of ``POST /v1/audio/speech``, validated in one place."""

    input: str
    voice: str | None
    response_format: str = "mp3"
    speed: float = 1.0
    stream_format: str = "audio"
    model: str | None = None
    """Accepted and ignored: ttsd has one model per voice."""
    noise_scale: float | None = None
    noise_w: float | None = None
    """ttsd extensions (protocol v1's meanings; 0 = the same audio every time)."""
    text_format: str | None = None
    """ttsd extension: ``text``, ``ssml`` or ``markdown``; None: ``http.text_format``."""
    stream: bool = True
    """False: a whole reply (:mod:`appliance.doors.whole`), a file with its real lengths
    (Kokoro-FastAPI's ``/dev/captioned_speech``: one JSON object, not NDJSON lines)."""
    word_timings: bool = False
    """ttsd extension: with ``stream_format: sse``, a ``ttsd.speech.word`` event per word."""
    visemes: bool = False
    """ttsd extension: with ``stream_format: sse`` a ``ttsd.speech.visemes`` event per
    chunk; captioned speech: ``visemes`` with each line (the whole reply's with one)."""
    sample_rate: int | None = None
    pace_ms: int | None = None
    """ttsd extensions for the raw formats (pcm, wav, G.711): the rate (G.711: 8000 Hz
    unless given), and frames of exactly ``pace_ms`` on the real-time clock."""
    deterministic: bool | None = None
    """ttsd extension: seeded sampling noise, the same bytes for the same text."""

    @classmethod
    def from_dict(cls, d: Any) -> SpeechBody:
        """OpenAI's fields, then ttsd's extensions, each checked as it is read."""
        if not isinstance(d, dict):
            raise BadField("", "the body must be a JSON object")
        text, voice, fmt, speed, sfmt, model = _openai_fields(d)
        return cls(text, voice, fmt, speed, sfmt, model, **_extensions(d, fmt))

    def out_rate(self, voice_rate: int) -> int | None:
        """The rate raw audio is sent at (None: the encoder's own choice)."""
        if self.sample_rate is not None:
            return self.sample_rate
        return G711_RATE if "law" in self.response_format else None

    def applied_speed(self) -> float:
        """OpenAI allows 0.25–4.0; ttsd 0.5–4.0 (0.5–1.25 without libsonic): clamped."""
        top = TTSD_SPEED[1] if stretch_available() else VOICE_SPEED_LIMIT
        return min(top, max(TTSD_SPEED[0], self.speed))

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "voice": self.voice,
            "response_format": self.response_format,
            "speed": self.speed,
            "stream_format": self.stream_format,
            "model": self.model,
            "noise_scale": self.noise_scale,
            "noise_w": self.noise_w,
            "text_format": self.text_format,
            "stream": self.stream,
            "word_timings": self.word_timings,
            "visemes": self.visemes,
            "sample_rate": self.sample_rate,
            "pace_ms": self.pace_ms,
            "deterministic": self.deterministic,
        }


def _bool(d: dict[str, Any], key: str) -> bool | None:
    value = d.get(key)
    if value is not None and not isinstance(value, bool):
        raise BadField(key, f"'{key}' must be true or false")
    return value


def _int(d: dict[str, Any], key: str, lo: int, hi: int) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadField(key, f"'{key}' must be an integer within {lo}–{hi}")
    return value


def _openai_fields(d: dict[str, Any]) -> tuple[str, str | None, str, float, str, str | None]:
    """``(input, voice, response_format, speed, stream_format, model)``, as OpenAI has them."""
    text = d.get("input")
    if not isinstance(text, str):
        raise BadField("input", "'input' must be a string")
    voice = d.get("voice")
    if isinstance(voice, dict):  # OpenAI's custom voice object {"id": ...}
        voice = voice.get("id")
    if voice is not None and (not isinstance(voice, str) or not voice):
        raise BadField("voice", "'voice' must be a voice name")
    fmt = d.get("response_format", "mp3")
    if fmt not in RESPONSE_FORMATS:
        what = f"{fmt!r} is not supported" if isinstance(fmt, str) else "'response_format'"
        raise BadField("response_format", f"{what}: use one of {', '.join(RESPONSE_FORMATS)}")
    speed = _number(d, "speed", 1.0)
    if speed is None or not OPENAI_SPEED[0] <= speed <= OPENAI_SPEED[1]:
        raise BadField("speed", "'speed' must be a number within 0.25–4.0")
    sfmt = d.get("stream_format", "audio")
    if sfmt not in STREAM_FORMATS:
        raise BadField("stream_format", "'stream_format' must be 'audio' or 'sse'")
    model = d.get("model")
    if model is not None and not isinstance(model, str):
        raise BadField("model", "'model' must be a string")
    return text, voice, fmt, speed, sfmt, model


def _extensions(d: dict[str, Any], fmt: str) -> dict[str, Any]:
    """ttsd's extensions of the body, by :class:`SpeechBody`'s field names."""
    out: dict[str, Any] = {}
    for key in ("noise_scale", "noise_w"):
        value = _number(d, key, None)
        if value is not None and not 0.0 <= value <= 2.0:
            raise BadField(key, f"'{key}' must be a number within 0.0–2.0")
        out[key] = value
    text_format = d.get("text_format")
    if text_format is not None and text_format not in TEXT_FORMATS:
        raise BadField("text_format", f"'text_format' must be one of {', '.join(TEXT_FORMATS)}")
    out["text_format"] = text_format
    for key, default in (("stream", True), ("word_timings", False), ("visemes", False)):
        flag = d.get(key, default)
        if not isinstance(flag, bool):
            raise BadField(key, f"'{key}' must be true or false")
        out[key] = flag
    for key, lo, hi in (("sample_rate", 8000, 192000), ("pace_ms", *PACE_MS)):
        out[key] = _int(d, key, lo, hi)
        if out[key] is not None and fmt not in RAW_FORMATS:
            raise BadField(key, f"'{key}' is for {', '.join(RAW_FORMATS)} only")
    if not out["stream"]:
        # A whole file is made before it is sent: nothing of it can be paced or evented.
        for key, streamed in (("pace_ms", None), ("stream_format", "audio")):
            if d.get(key, streamed) != streamed:
                raise BadField(key, f"'{key}' streams: not with \"stream\": false")
    if out["visemes"] and out["pace_ms"] is not None:
        raise BadField("visemes", "'visemes' go with chunks: not with paced frames")
    out["deterministic"] = _bool(d, "deterministic")
    return out


def _number(d: dict[str, Any], key: str, default: float | None) -> float | None:
    """A JSON number as a finite float (``default`` when absent); BadField otherwise.
    JSON integers have any number of digits: one past a float's range is refused, not an
    OverflowError."""
    value = d.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadField(key, f"'{key}' must be a number")
    try:
        f = float(value)
    except OverflowError:
        raise BadField(key, f"'{key}' is out of range") from None
    if not math.isfinite(f):
        raise BadField(key, f"'{key}' must be a finite number")
    return f


# ---------------------------------------------------------------- the door


class HttpDoor:
    name = DOOR

    def __init__(self, service: Service, cfg: HttpConfig, listen: str | None = None) -> None:
        self.service = service
        self.cfg = cfg
        self.listen = listen or cfg.listen
        self.api_key: bytes | None = None
        self.draining = False
        self._responses = 0
        self._idle = asyncio.Event()
        self._idle.set()
        """Set while no speech response is being sent (paced ones outlive their stream)."""
        self.paced = PacedSends()
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._guard_state: Guard | None = None
        self.port: int | None = None

    def _connections(self) -> int:
        return len(self._guard_state.held) if self._guard_state is not None else 0

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if not self.listen:
            raise ValueError("http: no listen address")
        host, port = parse_listen(self.listen, "http listen address")
        key = self.cfg.api_key
        if key is None and self.cfg.api_key_file:
            loop = asyncio.get_running_loop()
            try:
                text = await loop.run_in_executor(
                    None, functools.partial(Path(self.cfg.api_key_file).read_text, "utf-8")
                )
            except OSError as exc:
                raise ValueError(
                    f"http.api_key_file {self.cfg.api_key_file}: {exc.strerror or exc}"
                ) from exc
            key = text.strip().splitlines()[0].strip() if text.strip() else ""
        if key is not None and not key:
            raise ValueError("http: the API key is empty")
        if key is None and not is_loopback(host):
            raise ValueError(
                f"http: refusing to listen on {self.listen} without an API key: set"
                " http.api_key or http.api_key_file, or listen on 127.0.0.1"
            )
        self.api_key = key.encode() if key is not None else None
        app = web.Application(
            client_max_size=self.cfg.max_body_bytes,
            middlewares=[self._guard],
        )
        app.router.add_post("/v1/audio/speech", self.speech)
        app.router.add_post("/dev/captioned_speech", self.captioned_speech)
        app.router.add_get("/v1/audio/voices", self.voices)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        self.websockets = ElevenLabsRoutes(
            self.service, lambda: self.draining, lambda: self.service.runtime.config
        )
        self.websockets.add_to(app)  # ElevenLabs' input-streaming WebSocket (docs/agents.md)
        srv = self.service.runtime.config.limits
        handler_args: dict[str, Any] = {
            "access_log": None,
            "keepalive_timeout": srv.idle_timeout_s or 75.0,
            "auto_decompress": False,  # no gzip bombs past the body cap
            # aiohttp's own head limits, under http.max_header_bytes (which the guard
            # applies to the whole head): they bound what it buffers of a pipelined head.
            "max_line_size": min(8190, self.cfg.max_header_bytes),
            "max_field_size": min(8190, self.cfg.max_header_bytes),
            "max_headers": _MAX_HEADERS,
        }
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            shutdown_timeout=2.0,
            handler_cancellation=True,  # a disconnect cancels the handler: the stream stops
            **handler_args,
        )
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        loop = asyncio.get_running_loop()
        quiet_accept_errors(loop)
        guard = self._guard_state = Guard(
            lambda: self.cfg, lambda: self.service.runtime.config.limits.reserved_fds
        )

        def handler() -> GuardedHandler:
            return GuardedHandler(server, guard, loop=loop, **handler_args)

        self._server = await loop.create_server(
            handler, host, port, family=family, reuse_address=True, backlog=128
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._pool = ThreadPoolExecutor(_ENCODE_THREADS, "http-encode")
        self.service.add_door(DOOR, self._connections)
        log.info(
            "http: listening on %s:%d (%s)",
            host,
            self.port,
            "API key required" if self.api_key else "no API key: loopback only",
        )

    def close_listener(self) -> None:
        # Keep answering: /healthz says 503 while the core drains; speech says shutting_down.
        self.draining = True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ middleware

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        # (The connection cap is applied at accept: appliance.doors.httpguard.)
        if self.api_key is not None and request.path not in _OPEN_PATHS:
            if not self._key_ok(request):
                self.service.record_error(ErrorCode.UNAUTHORIZED)
                refused = error_response(
                    ServiceError(ErrorCode.UNAUTHORIZED, "missing or wrong API key")
                )
                refused.force_close()  # no second try on this connection
                return refused
        if isinstance(request.protocol, GuardedHandler) and request.path not in _OPEN_PATHS:
            request.protocol.authenticated = True  # may wait as long as any keep-alive
        try:
            return await self._handle(request, handler)
        except (asyncio.CancelledError, ConnectionError):
            raise  # the client went away: aiohttp knows what to do
        except Exception as exc:
            # A bug on this request's path: the documented JSON error, never aiohttp's
            # text page; the traceback once, then one line per 10 s.
            _THROTTLE.log(
                log,
                logging.ERROR,
                "internal",
                "http: %s %s failed (%s): 500 internal",
                request.method,
                request.path[:64],
                type(exc).__name__,
                exc_info=exc,
            )
            self.service.record_error(ErrorCode.INTERNAL)
            r = error_response(ServiceError(ErrorCode.INTERNAL, "internal error"))
            r.force_close()
            return r

    def _key_ok(self, request: web.Request) -> bool:
        """Constant-time comparison of the bearer token with the key.  Header bytes that
        are not UTF-8 (or Latin-1 ones) arrive as surrogates: compared as the bytes they
        were, so they are just a wrong key (401), not an encoding error."""
        assert self.api_key is not None
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if request.path.startswith(WS_PREFIX) and "xi-api-key" in request.headers:
            scheme, token = "bearer", request.headers["xi-api-key"]  # ElevenLabs' header
        try:
            raw = token.strip().encode("utf-8", "surrogateescape")
        except UnicodeError:
            return False
        return hmac.compare_digest(raw, self.api_key) and scheme.lower() == "bearer"

    async def _handle(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            resp: web.StreamResponse = await handler(request)
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
        return resp

    # ------------------------------------------------------------ small endpoints

    async def voices(self, request: web.Request) -> web.Response:
        info = self.service.info()
        voices = [
            {
                "id": v.get("name"),
                "name": v.get("name"),
                "language": v.get("language"),
                "sample_rate": v.get("sample_rate"),
                "speakers": v.get("speakers"),
            }
            for v in info.get("voices", [])
        ]
        default = info.get("default_voice")
        aliases = {name: self._voice_for(name) or default for name in OPENAI_VOICES}
        return web.json_response({"voices": voices, "default": default, "openai_aliases": aliases})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "ttsd"}],
            }
        )

    async def healthz(self, request: web.Request) -> web.Response:
        health = self.service.health()
        if self.draining or self.service.stopping or self.service.draining:
            health["status"] = "draining"
            health["serving"] = False
        code = 200 if health["serving"] and health["status"] in ("ok", "degraded") else 503
        return web.json_response(health, status=code)

    async def readyz(self, request: web.Request) -> web.Response:
        cap = capacity_of(self.service)
        if self.draining and cap.state == "ready":
            cap = Capacity("drain", reason="stopping")
        return web.json_response(cap.to_dict(), status=200 if cap.state == "ready" else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.service.runtime.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # ------------------------------------------------------------ speech

    def _voice_for(self, name: str | None) -> str | None:
        """A ttsd voice name, an OpenAI name mapped through ``voice_map``, or None (the
        default voice); an unknown name passes through for the core to refuse."""
        if name is None or name in self.service.runtime.voices:
            return name
        mapped = self.cfg.voice_map.get(name)
        if mapped is not None:
            return mapped
        if name.lower() in OPENAI_VOICES:
            return self.cfg.voice_map.get(name.lower())
        return name

    def _voice_and_speaker(self, name: str | None) -> tuple[str | None, str | None]:
        """``voice`` (or what ``voice_map`` maps it to) as ``NAME`` or ``NAME:SPEAKER``
        (a speaker's name or number): voice names never hold a colon."""
        voice = self._voice_for(name)
        if voice is None or ":" not in voice:
            return voice, None
        voice, _, speaker = voice.partition(":")
        return voice or None, speaker

    async def speech(self, request: web.Request) -> web.StreamResponse:
        return await self._counted(request, captioned=False)

    async def captioned_speech(self, request: web.Request) -> web.StreamResponse:
        """Kokoro-FastAPI's ``/dev/captioned_speech``: audio (base64) with word timestamps."""
        return await self._counted(request, captioned=True)

    async def _counted(self, request: web.Request, captioned: bool) -> web.StreamResponse:
        """One speech response, counted while it is sent (see :meth:`wait_idle`)."""
        self._responses += 1
        self._idle.clear()
        try:
            return await self._speech(request, captioned)
        finally:
            self._responses -= 1
            if not self._responses:
                self._idle.set()

    async def wait_idle(self, deadline: float) -> None:
        """Until no speech response is being sent, or ``deadline``; paced ones still on the
        clock then end with ``shutting_down`` (SSE: an ``error`` event; else truncated)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await self._idle.wait()
        for _ in range(await self.paced.drain(deadline)):
            self.service.record_error(ErrorCode.SHUTTING_DOWN)

    async def _speech(self, request: web.Request, captioned: bool) -> web.StreamResponse:
        if self.draining or self.service.stopping:
            self.service.record_error(ErrorCode.SHUTTING_DOWN)
            return error_response(
                ServiceError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
            )
        try:
            body = await self._read_body(request)
            voice, speaker = self._voice_and_speaker(body.voice)
            req = SpeechRequest(
                text=body.input,
                voice=voice,
                speaker=speaker,
                speed=body.applied_speed(),
                noise_scale=body.noise_scale,
                noise_w=body.noise_w,
                text_format=body.text_format or self.cfg.text_format,
                word_timings=captioned
                or body.word_timings
                or body.response_format in captions.CAPTION_FORMATS,
                visemes=body.visemes,
                deterministic=body.deterministic,
            )
            if captioned and body.response_format in captions.CAPTION_FORMATS:
                raise BadField("response_format", "captioned speech is audio: not vtt or srt")
            if body.visemes and not (captioned or body.stream_format == "sse"):
                raise BadField("visemes", "'visemes' come as events: with sse or captioned speech")
        except BadField as exc:
            self.service.record_error(exc.code)
            return error_response(exc, exc.param or None)
        except ServiceError as exc:
            self.service.record_error(exc.code)
            resp = error_response(exc)
            if isinstance(exc, _Closing):
                resp.force_close()
            return resp
        try:
            stream = await self.service.open_stream(req, door=DOOR, label={"peer": request.remote})
        except ServiceError as exc:  # counted by the core
            return error_response(exc, "voice" if exc.code == ErrorCode.UNKNOWN_VOICE else None)
        try:
            if body.response_format in captions.CAPTION_FORMATS or not body.stream:
                return await self._whole(request, body, stream, captioned)
            return await self._stream(request, body, stream, captioned)
        except ServiceError as exc:  # before any audio (the encoder could not be made)
            self.service.record_error(exc.code)
            return error_response(exc)
        finally:
            stream.close()

    async def _read_body(self, request: web.Request) -> SpeechBody:
        limit = self.cfg.max_body_bytes
        # A refusal before the whole body was read closes the connection after the answer
        # (no keep-alive: the rest of the body would be read as the next request's head).
        if request.content_length is not None and request.content_length > limit:
            raise _Closing(ErrorCode.FRAME_TOO_LARGE, f"the body may be at most {limit} bytes")
        timeout = self.service.runtime.config.limits.frame_timeout_s
        try:
            async with asyncio.timeout(timeout):
                raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _Closing(
                ErrorCode.FRAME_TOO_LARGE, f"the body may be at most {limit} bytes"
            ) from None
        except TimeoutError:
            if isinstance(request.protocol, GuardedHandler):
                # Closed with the answer: aiohttp would read 10 s more for the body first.
                request.protocol.no_linger()
            raise _Closing(
                ErrorCode.BAD_REQUEST, f"the body did not arrive within {timeout:g} s"
            ) from None
        try:
            data = json.loads(raw)
        except RecursionError:
            raise BadField("", "the body is nested too deeply") from None
        except (ValueError, UnicodeDecodeError):
            raise BadField("", "the body is not valid JSON") from None
        return SpeechBody.from_dict(data)

    async def _whole(
        self, request: web.Request, body: SpeechBody, stream: Stream, captioned: bool
    ) -> web.StreamResponse:
        """A whole reply, made before its first byte leaves (:mod:`appliance.doors.whole`):
        captions (``vtt``, ``srt``), a file (``"stream": false``), or Kokoro's captioned
        speech as one JSON object (base64 audio and timestamps)."""
        fmt = body.response_format
        cues = captions.CueBuilder(body.input, text_format=stream.request.text_format)
        bound = whole.Bound(self.cfg.max_whole_audio_s, stream.sample_rate)
        shapes: list[Viseme] = []  # bounded with the audio (max_whole_audio_s)
        buf = io.BytesIO()
        file = None
        if fmt not in captions.CAPTION_FORMATS:
            rate = body.out_rate(stream.sample_rate)
            file = await self._built(body, lambda: FileOut(fmt, stream.sample_rate, buf, rate))
        loop = asyncio.get_running_loop()

        async def emit(chunk: Chunk) -> None:
            bound.add(len(chunk.samples), buf.tell())  # (no encode runs now: tell is safe)
            cues.add(chunk.words or (), chunk.sentence_end)
            shapes.extend(chunk.visemes or ())
            if file is not None:
                await loop.run_in_executor(self._pool, file.write, chunk.samples)

        try:
            await self._run_emit(stream, emit)
            if file is not None:
                await loop.run_in_executor(self._pool, file.finish)
        except ServiceError as exc:
            return error_response(exc, "input" if exc.code == ErrorCode.TEXT_TOO_LONG else None)
        finally:
            if file is not None:
                await release(self._pool, file.close)
        if file is None:
            text = captions.render(fmt, cues.finish())
            mime = "text/vtt" if fmt == "vtt" else "application/x-subrip"
            return web.Response(text=text, content_type=mime, charset="utf-8")
        if captioned:
            stamps = captions.kokoro_timestamps(cues.words, body.input)
            visemes = captions.visemes_dict(shapes) if body.visemes else None
            size, pieces = whole.captioned_json(buf, fmt, stamps, visemes)
            kind = "application/json"
        else:
            size, pieces = whole.file_pieces(buf)
            kind = file.content_type
        headers = audio_headers(body, stream, file.sample_rate)
        return await self._send_whole(request, kind, headers, size, pieces)

    async def _send_whole(
        self,
        request: web.Request,
        kind: str,
        headers: dict[str, str],
        size: int,
        pieces: Iterator[bytes],
    ) -> web.StreamResponse:
        """``size`` bytes with a Content-Length, a piece at a time under the too-slow rule."""
        resp = web.StreamResponse(status=200, headers={"Content-Type": kind, **headers})
        resp.content_length = size
        assert request.transport is not None
        outbox = Outbox(request.transport, lambda: self.service.runtime.config.limits)
        try:
            await resp.prepare(request)
            for piece in pieces:
                await outbox.guard(resp.write(piece))
            await resp.write_eof()
        except ClientTooSlow:
            self.service.record_error(ErrorCode.CLIENT_TOO_SLOW)
            log.warning("http: client_too_slow (not reading a whole reply): closing")
            _abort(request, reset=True)
        except (ConnectionError, OSError):
            _abort(request)
        return resp

    @staticmethod
    async def _run_emit(stream: Stream, emit: Callable[[Chunk], Any]) -> StreamResult:
        run = asyncio.ensure_future(stream.run(emit))
        try:
            return await asyncio.shield(run)
        except asyncio.CancelledError:
            stream.cancel("disconnect")  # the client went away
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await run
            raise

    async def _stream(
        self, request: web.Request, body: SpeechBody, stream: Stream, captioned: bool = False
    ) -> web.StreamResponse:
        sink = _AudioSink(
            request,
            body,
            stream,
            await self._encoder(body, stream),
            self._pool,
            lambda: self.service.runtime.config.limits,
            captioned,
            self.paced,
        )
        try:
            result = await self._run(sink, stream)
            if sink.gone is not None:
                if sink.gone == "too_slow":
                    self.service.record_error(ErrorCode.CLIENT_TOO_SLOW)
                    log.warning("http: client_too_slow (not reading its audio): closing")
                _abort(request, reset=sink.gone == "too_slow")
                return sink.resp
            await sink.finish()
            log.debug("http: stream %d %s", stream.number, result.stats)
            return sink.resp
        except ServiceError as exc:
            return await self._fail(request, sink.resp, exc, sink.sse)
        except (ConnectionError, OSError):
            _abort(request)
            return sink.resp
        finally:
            await sink.close()

    async def _encoder(self, body: SpeechBody, stream: Stream) -> Encoder:
        rate = body.out_rate(stream.sample_rate)
        return await self._built(
            body, lambda: make_encoder(body.response_format, stream.sample_rate, rate)
        )

    async def _built(self, body: SpeechBody, make: Callable[[], T]) -> T:
        """``body``'s encoder, by ``make``; ServiceError ``internal`` if it cannot be."""
        try:
            if body.response_format in RAW_FORMATS:
                return make()
            # libsndfile opens its codec: off the loop
            return await asyncio.get_running_loop().run_in_executor(self._pool, make)
        except (RuntimeError, ValueError) as exc:  # libsndfile refused the rate
            log.exception("http: cannot make a %s encoder", body.response_format)
            raise ServiceError(ErrorCode.INTERNAL, f"cannot encode {body.response_format}") from exc

    @staticmethod
    async def _run(sink: _AudioSink, stream: Stream) -> StreamResult:
        run = asyncio.ensure_future(stream.run(sink.emit))
        try:
            return await asyncio.shield(run)
        except asyncio.CancelledError:
            # The client went away (aiohttp cancels the handler): stop the work now.
            stream.cancel("disconnect")
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await run
            raise

    async def _fail(
        self, request: web.Request, resp: web.StreamResponse, exc: ServiceError, sse: bool
    ) -> web.StreamResponse:
        """The stream failed: a JSON error if nothing was sent yet; an SSE error event;
        else the transfer is cut (no final chunk), which clients report as truncated."""
        if not resp.prepared:
            return error_response(exc)
        if sse:
            event = {
                "type": "error",
                "error": {"message": exc.message, "type": "server_error", "code": exc.code},
            }
            with contextlib.suppress(ConnectionError, OSError):
                await write_raw(resp, request, f"data: {json.dumps(event)}\n\n".encode())
                await resp.write_eof()
            return resp
        _abort(request)
        return resp


class _AudioSink:
    """One speech response as its stream's ``emit``: encodes each chunk, frames it (raw
    bytes or SSE events), writes it under the doors' one too-slow rule
    (:class:`~appliance.doors.net.Outbox`), and remembers why the client was lost."""

    def __init__(
        self,
        request: web.Request,
        body: SpeechBody,
        stream: Stream,
        encoder: Encoder,
        pool: ThreadPoolExecutor | None,
        limits: Callable[[], LimitsConfig],
        ndjson: bool = False,
        paced: PacedSends | None = None,
    ) -> None:
        self.request, self.body, self.stream, self.encoder = request, body, stream, encoder
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self.sse = body.stream_format == "sse" and not ndjson
        self.ndjson = ndjson
        """Kokoro's streamed captioned speech: a JSON line per chunk, its words with it."""
        self._words: tuple[Word, ...] = ()
        self._visemes: tuple[Viseme, ...] = ()
        """The chunk's visemes (``visemes``), sent with its audio."""
        kind = "text/event-stream" if self.sse else encoder.content_type
        self.resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/x-ndjson" if ndjson else kind,
                "Cache-Control": "no-cache",
                **audio_headers(body, stream, encoder.sample_rate),
            },
        )
        self.resp.enable_chunked_encoding()
        assert request.transport is not None
        self.outbox = Outbox(request.transport, limits)
        self.deltas = 0
        self.first = True
        self.gone: str | None = None
        """Why the client is lost ("too_slow", "disconnect"), once it is."""
        self.pacer: Pacer[None] | None = None
        if body.pace_ms is not None and isinstance(encoder, PcmOut):
            self.pacer = Pacer(
                body.pace_ms,
                encoder.sample_rate,
                encoder.pcm.bytes_per_sample,
                encoder.pcm.silence,
                self._send_frame,
                paced,
            )

    async def _send_frame(self, frame: PacedFrame[None]) -> None:
        self._words = tuple(frame.words)  # those that start in this frame (pace.py)
        await self.write(frame.data)

    async def emit(self, chunk: Chunk) -> None:
        data = await self._encode(chunk.samples, chunk.final)
        if self.pacer is not None:
            if self.first:
                self.first = False
                await self.write(self.encoder.header())  # the header is not paced
            await self.pacer.put(data, None, chunk.words)
            return
        self._words = chunk.words or ()
        self._visemes += chunk.visemes or ()
        if self.first:
            self.first = False
            data = self.encoder.header() + data
            if not data and not self.resp.prepared and self.gone is None:
                with contextlib.suppress(ConnectionError, OSError):
                    await self.resp.prepare(self.request)  # the headers leave with the first
        await self.write(data)

    async def write(self, data: bytes) -> None:
        if (not data and not self._words and not self._visemes) or self.gone is not None:
            return
        if self.ndjson:
            line: dict[str, Any] = {
                "audio": base64.b64encode(data).decode(),
                "audio_format": self.body.response_format,
                "timestamps": captions.kokoro_timestamps(self._words, self.body.input),
            }
            if self.body.visemes:
                line["visemes"] = captions.visemes_dict(self._visemes)
            self._words, self._visemes = (), ()
            data = (json.dumps(line) + "\n").encode()
        elif self.sse:
            events: list[dict[str, Any]] = []
            if data:
                events.append(
                    {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
                )
                self.deltas += 1
            for stamp in captions.kokoro_timestamps(self._words, self.body.input):
                events.append({"type": "ttsd.speech.word", **stamp})
            if self._visemes:
                shapes = captions.visemes_dict(self._visemes)
                events.append({"type": "ttsd.speech.visemes", **shapes})
            self._words, self._visemes = (), ()
            data = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()
        elif not data:
            return
        try:
            if not self.resp.prepared:
                await self.resp.prepare(self.request)
            await self.outbox.guard(self.resp.write(data), self.stream.buffer_s())
        except ClientTooSlow:
            self.gone = "too_slow"
        except (ConnectionError, OSError):
            self.gone = "disconnect"
        if self.gone is not None:
            # End the stream as a cancel (not an error of the core): run() returns.
            self.stream.cancel("disconnect")

    async def _encode(self, samples: Any, last: bool) -> bytes:
        try:
            if isinstance(self.encoder, SoundfileOut):
                return await self._loop.run_in_executor(
                    self._pool, self.encoder.encode, samples, last
                )
            return self.encoder.encode(samples, last)
        except (RuntimeError, ValueError, TypeError) as exc:
            log.exception("http: %s encoding failed", self.body.response_format)
            raise ServiceError(ErrorCode.INTERNAL, "audio encoding failed") from exc

    async def finish(self) -> None:
        """The encoder's tail, SSE's closing event with its usage, the end of the body."""
        tail = await self._loop.run_in_executor(self._pool, self.encoder.finish)
        if self.pacer is not None:
            await self.write(self.encoder.header() if self.first else b"")
            await self.pacer.put(tail, None)
            await self.pacer.close()
        else:
            await self.write((self.encoder.header() if self.first else b"") + tail)
        if self.sse and self.gone is None:
            text = len(self.body.input)
            usage = {
                "input_tokens": text,
                "output_tokens": self.deltas,
                "total_tokens": text + self.deltas,
            }
            done = {"type": "speech.audio.done", "usage": usage}
            await write_raw(self.resp, self.request, f"data: {json.dumps(done)}\n\n".encode())
        if not self.resp.prepared:
            await self.resp.prepare(self.request)
        await self.resp.write_eof()

    async def close(self) -> None:
        if self.pacer is not None:
            await self.pacer.stop()
        if isinstance(self.encoder, SoundfileOut):
            await release(self._pool, self.encoder.close)


async def release(pool: ThreadPoolExecutor | None, close: Callable[[], None]) -> None:
    """Close an encoder: an encode may still run in a worker (its await was cancelled), so
    close after it, off the loop."""
    try:
        await asyncio.shield(asyncio.get_running_loop().run_in_executor(pool, close))
    except RuntimeError:  # the pool is shut down: the daemon is closing
        close()
    except asyncio.CancelledError:
        pass  # the shielded close still runs


def audio_headers(body: SpeechBody, stream: Stream, rate: int) -> dict[str, str]:
    """What a speech response says of its audio: rate, voice, the speed used."""
    return {
        "X-Sample-Rate": str(rate),
        "X-Voice": stream.voice_name,
        "X-Speed-Applied": f"{body.applied_speed():g}",
    }


async def write_raw(resp: web.StreamResponse, request: web.Request, data: bytes) -> None:
    if not resp.prepared:
        await resp.prepare(request)
    await resp.write(data)


def _abort(request: web.Request, reset: bool = False) -> None:
    """Cut the connection; with ``reset``, also discard what the client has not read
    (:func:`appliance.doors.net.drop_connection`)."""
    transport = request.transport
    if transport is not None:
        if reset:
            drop_connection(transport)
        else:
            transport.abort()
