"""``POST /v1/audio/speech`` (OpenAI's) and ``POST /dev/captioned_speech`` (Kokoro's):
the body → a stream of the core → a reply.

What it adds to the frame: the frame's :func:`~appliance.doors.frame.ending.settle`
decides how each request ends; an HTTP request's end is its response, so here each
ending becomes one:

==================  ==============================================================
ending              the response
==================  ==============================================================
``Done``            the reply, sent whole
``Failed``          nothing sent yet: OpenAI's JSON error (a bug's: 500 ``internal``,
                    logged by the door's :class:`~appliance.doors.frame.ending.Report`);
                    SSE under way: an ``error`` event; else the transfer is cut (no
                    final chunk), which clients report as truncated
``Lost``            the connection is cut (``client_too_slow``: counted, logged, and
                    what the client has not read discarded)
==================  ==============================================================

The reply is streamed (:class:`~appliance.doors.http.sink.AudioSink`: audio bytes, SSE
or NDJSON) or made whole first (captions, ``"stream": false``, Kokoro's one JSON object;
:mod:`appliance.doors.whole` bounds it by ``http.max_whole_audio_s``).  A client that
disconnects cancels its stream at once (aiohttp cancels the handler).  While the daemon
stops, new speech is answered 503 ``shutting_down``; :meth:`SpeechRoutes.wait_idle`
waits for replies still being sent (paced ones outlive their stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from appliance.core.service import Stream, StreamResult
from appliance.doors import captions, whole
from appliance.doors.formats import RAW_FORMATS, Encoder, FileOut, make_encoder
from appliance.doors.frame.door import DoorBase
from appliance.doors.frame.ending import Done, Ending, Failed, Report, settle
from appliance.doors.http.errors import error_response, refusal
from appliance.doors.http.gate import read_body
from appliance.doors.http.request import BadField, SpeechBody
from appliance.doors.http.sink import AudioSink, audio_headers, release, write_raw
from appliance.doors.net import Outbox, drop_connection
from appliance.doors.pace import PacedSends
from appliance.errors import ErrorCode, ServiceError
from appliance.speech import Chunk, SpeechRequest, Viseme

log = logging.getLogger("appliance.doors.http")

DOOR = "http"

T = TypeVar("T")

_ENCODE_THREADS = 2
"""MP3 and Opus cost a few ms per chunk: off the event loop, beside the inference workers."""


class SpeechRoutes:
    """The speech endpoints on ``door``'s core, and the replies being sent."""

    def __init__(self, door: DoorBase, report: Report, paced: PacedSends) -> None:
        self.door = door
        self.service = door.service
        self.report = report
        self.paced = paced
        self.pool = ThreadPoolExecutor(_ENCODE_THREADS, "http-encode")
        self._responses = 0
        self._idle = asyncio.Event()
        self._idle.set()
        """Set while no speech response is being sent (paced ones outlive their stream)."""

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/speech", self.speech)
        app.router.add_post("/dev/captioned_speech", self.captioned_speech)

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

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ one request

    async def _speech(self, request: web.Request, captioned: bool) -> web.StreamResponse:
        stop = self.door.shutting_down()
        if stop is not None:
            return error_response(stop)
        parsed = await self._request(request, captioned)
        if isinstance(parsed, web.Response):
            return parsed
        body, req = parsed
        try:
            stream = await self.service.open_stream(req, door=DOOR, label={"peer": request.remote})
        except ServiceError as exc:  # counted by the core
            return error_response(exc, "voice" if exc.code == ErrorCode.UNKNOWN_VOICE else None)
        try:
            if body.whole:
                return await self._whole(request, body, stream, captioned)
            return await self._stream(request, body, stream, captioned)
        except ServiceError as exc:  # before any audio (the encoder could not be made)
            self.report.count(exc.code)
            return error_response(exc)
        finally:
            stream.close()

    async def _request(
        self, request: web.Request, captioned: bool
    ) -> tuple[SpeechBody, SpeechRequest] | web.Response:
        """The body, bounded and checked, and the core's request; or the refusal."""
        cfg = self.door.config
        try:
            raw = await read_body(request, cfg.http.max_body_bytes, cfg.limits.frame_timeout_s)
            body = SpeechBody.parse(raw)
            return body, body.to_request(captioned, cfg.http, self.service.runtime.voices)
        except ServiceError as exc:  # BadField names its param; a Closing closes
            self.report.count(exc.code)
            return refusal(exc, (exc.param or None) if isinstance(exc, BadField) else None)

    async def _ended(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        ending: Ending[web.StreamResponse],
        sse: bool = False,
        param: str | None = None,
    ) -> web.StreamResponse:
        """The one place a speech request's ending becomes its response (the module doc)."""
        if isinstance(ending, Done):
            return ending.value
        if isinstance(ending, Failed):
            return await self._fail(request, resp, ending.error, sse, param)
        if ending.too_slow:
            self.report.count(ErrorCode.CLIENT_TOO_SLOW)
            log.warning("http: client_too_slow (not reading its reply): closing")
        _abort(request, reset=ending.too_slow)
        return resp

    @staticmethod
    async def _fail(
        request: web.Request,
        resp: web.StreamResponse,
        exc: ServiceError,
        sse: bool,
        param: str | None,
    ) -> web.StreamResponse:
        """The stream failed: a JSON error if nothing was sent yet; an SSE error event;
        else the transfer is cut (no final chunk), which clients report as truncated."""
        if not resp.prepared:
            return error_response(exc, param)
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

    def _settle(self, request: web.Request, body: Awaitable[T]) -> Awaitable[Ending[T]]:
        return settle(body, self.report, "speech", str(request.remote))

    # ------------------------------------------------------------ streamed

    async def _stream(
        self, request: web.Request, body: SpeechBody, stream: Stream, captioned: bool = False
    ) -> web.StreamResponse:
        sink = AudioSink(
            request,
            body,
            stream,
            await self._encoder(body, stream),
            self.pool,
            lambda: self.door.limits,
            captioned,
            self.paced,
        )
        try:
            ending = await self._settle(request, self._streamed(sink, stream))
            return await self._ended(request, sink.resp, ending, sink.sse)
        finally:
            await sink.close()

    @staticmethod
    async def _streamed(sink: AudioSink, stream: Stream) -> web.StreamResponse:
        result = await run_stream(stream, sink.emit)
        sink.lost()
        await sink.finish()
        log.debug("http: stream %d %s", stream.number, result.stats)
        return sink.resp

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
            return await asyncio.get_running_loop().run_in_executor(self.pool, make)
        except (RuntimeError, ValueError) as exc:  # libsndfile refused the rate
            log.exception("http: cannot make a %s encoder", body.response_format)
            raise ServiceError(ErrorCode.INTERNAL, f"cannot encode {body.response_format}") from exc

    # ------------------------------------------------------------ whole

    async def _whole(
        self, request: web.Request, body: SpeechBody, stream: Stream, captioned: bool
    ) -> web.StreamResponse:
        """A whole reply, made before its first byte leaves (:mod:`appliance.doors.whole`):
        captions (``vtt``, ``srt``), a file (``"stream": false``), or Kokoro's captioned
        speech as one JSON object (base64 audio and timestamps)."""
        buf = io.BytesIO()
        file = None
        if body.response_format not in captions.CAPTION_FORMATS:
            rate = body.out_rate(stream.sample_rate)
            fmt = body.response_format
            file = await self._built(body, lambda: FileOut(fmt, stream.sample_rate, buf, rate))
        resp = web.StreamResponse(status=200)
        made = self._made_whole(request, resp, body, stream, file, buf, captioned)
        ending = await self._settle(request, made)
        too_long = isinstance(ending, Failed) and ending.error.code == ErrorCode.TEXT_TOO_LONG
        return await self._ended(request, resp, ending, param="input" if too_long else None)

    async def _made_whole(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        body: SpeechBody,
        stream: Stream,
        file: FileOut | None,
        buf: io.BytesIO,
        captioned: bool,
    ) -> web.StreamResponse:
        cues, shapes = await self._render(body, stream, file, buf)
        if file is None:
            text = captions.render(body.response_format, cues.finish())
            mime = "text/vtt" if body.response_format == "vtt" else "application/x-subrip"
            return web.Response(text=text, content_type=mime, charset="utf-8")
        if captioned:
            stamps = captions.kokoro_timestamps(cues.words, body.input)
            visemes = captions.visemes_dict(shapes) if body.visemes else None
            size, pieces = whole.captioned_json(buf, body.response_format, stamps, visemes)
            kind = "application/json"
        else:
            size, pieces = whole.file_pieces(buf)
            kind = file.content_type
        resp.headers.update({"Content-Type": kind, **audio_headers(body, stream, file.sample_rate)})
        resp.content_length = size
        return await self._send_whole(request, resp, pieces)

    async def _render(
        self, body: SpeechBody, stream: Stream, file: FileOut | None, buf: io.BytesIO
    ) -> tuple[captions.CueBuilder, list[Viseme]]:
        """The whole stream into ``file`` (bounded), its words and visemes kept."""
        cues = captions.CueBuilder(body.input, text_format=stream.request.text_format)
        bound = whole.Bound(self.door.config.http.max_whole_audio_s, stream.sample_rate)
        shapes: list[Viseme] = []  # bounded with the audio (max_whole_audio_s)
        loop = asyncio.get_running_loop()

        async def emit(chunk: Chunk) -> None:
            bound.add(len(chunk.samples), buf.tell())  # (no encode runs now: tell is safe)
            cues.add(chunk.words or (), chunk.sentence_end)
            shapes.extend(chunk.visemes or ())
            if file is not None:
                await loop.run_in_executor(self.pool, file.write, chunk.samples)

        try:
            await run_stream(stream, emit)
            if file is not None:
                await loop.run_in_executor(self.pool, file.finish)
        finally:
            if file is not None:
                await release(self.pool, file.close)
        return cues, shapes

    async def _send_whole(
        self, request: web.Request, resp: web.StreamResponse, pieces: Iterator[bytes]
    ) -> web.StreamResponse:
        """The reply, a piece at a time under the too-slow rule."""
        assert request.transport is not None
        outbox = Outbox(request.transport, lambda: self.door.limits)
        await resp.prepare(request)
        for piece in pieces:
            await outbox.guard(resp.write(piece))
        await resp.write_eof()
        return resp


async def run_stream(stream: Stream, emit: Callable[[Chunk], Any]) -> StreamResult:
    """``stream.run(emit)``; if the client goes away (aiohttp cancels the handler), the
    stream is cancelled and waited for, not abandoned."""
    run = asyncio.ensure_future(stream.run(emit))
    try:
        return await asyncio.shield(run)
    except asyncio.CancelledError:
        stream.cancel("disconnect")
        # The client is gone: however the cancelled run ends, there is no one to tell.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await run
        raise


def _abort(request: web.Request, reset: bool = False) -> None:
    """Cut the connection; with ``reset``, also discard what the client has not read
    (:func:`appliance.doors.net.drop_connection`)."""
    transport = request.transport
    if transport is not None:
        if reset:
            drop_connection(transport)
        else:
            transport.abort()
