"""What Wyoming adds to the door frame for one connection: its events, and each one's work.

- ``describe`` → ``info`` (one TTS program, every loaded voice) and ``ping`` → ``pong``,
  answered by the connection's reader at once, whatever the inference workers are doing.
- ``synthesize`` → one request: ``audio-start``, ``audio-chunk``\\* as the chunks are
  made, ``audio-stop``.  A ``synthesize`` that comes while one is speaking interrupts it
  (barge-in): its audio stops at once, and its ``audio-stop`` carries
  ``sent_text_span``; the new one is answered next.
- ``synthesize-start`` → ``synthesize-chunk``\\* → ``synthesize-stop``: one request with
  text that streams in (the core's ``text_stream``), so audio starts when the core's
  text-stream rule releases the first segment; ``synthesize-stopped`` after the last
  audio.  The compatibility ``synthesize`` a client sends inside a stream is ignored.
- Errors are ``error`` events (``text``, ``code`` = the core's error code); the
  connection goes on.  Unknown event types are ignored, as the protocol says.

Requests are answered in order (Wyoming events carry no request id): one worker task per
connection runs them one after the other, at most ``limits.max_inflight_per_connection``
queued (beyond, ``too_many_requests`` at once); the reader keeps reading, so
``describe`` and the text of an open stream never wait behind audio.  Text that comes
before its stream opens is held by the frame's request (bounded by
``limits.max_text_chars``).  EOF is a disconnect: the connection's work stops at once.

The frame (:class:`~appliance.doors.frame.session.Session`) owns the rest: the read
timeouts, the output bound and ``client_too_slow``, each request's one ending, a bug's
``internal``, refusal and close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)

from appliance.core.service import SentText, Service, Stream
from appliance.doors.frame.requests import Request
from appliance.doors.frame.session import Fatal, Session, StreamChannel, WireProtocol
from appliance.doors.pcm import PcmEncoder
from appliance.doors.wyoming.events import (
    SAMPLE_WIDTH,
    BadEvent,
    BoundedReader,
    FrameTooLarge,
    chunk_text,
    error_event,
    event_bytes,
    info_event,
    read_event,
)
from appliance.doors.wyoming.messages import SynthesizeMessage
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config
from appliance.speech import Chunk

log = logging.getLogger("appliance.doors.wyoming")

INTERRUPTED = "interrupted"
"""The cancel reason of a request a newer ``synthesize`` cut short (its client is there)."""
SENT_TEXT_SPAN = "sent_text_span"
"""ttsd's extension on an interrupted request's ``audio-stop`` (Wyoming clients read the
fields they know): ``[start, end)`` of its text that the audio sent reaches (protocol
v1's ``end.sent_text_span``); ``[0, 0]`` when none was sent."""


@dataclass
class _Job:
    """A queued request: its message, or the error it ends with in its turn."""

    req: Request
    message: SynthesizeMessage | None = None
    error: ServiceError | None = None


class WyomingProtocol(WireProtocol[Event]):
    """One Wyoming connection's events and requests (see the module doc)."""

    reads_while_full = True
    """The reader's own answers (``info``, ``pong``, ``too_many_requests``) wait with
    back-pressure: a client that sends and never reads cannot pile them up."""

    def __init__(self, session: Session, service: Service) -> None:
        super().__init__(session)
        channel = session.channel
        assert isinstance(channel, StreamChannel) and isinstance(channel.reader, BoundedReader)
        self.reader = channel.reader
        self.service = service
        self.jobs: deque[_Job] = deque()
        self.current: _Job | None = None
        self.text_job: Request | None = None
        """The request whose ``synthesize-chunk`` events are arriving."""
        self._seq = 0
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None

    @property
    def config(self) -> Config:
        return self.service.runtime.config

    # ------------------------------------------------------------ the frame's hooks

    def opened(self) -> None:
        self.reader.on_data = self.session.timer.began  # an event begun ends in frame_timeout_s
        self._worker = asyncio.create_task(self._work())

    async def read(self) -> Event | None:
        try:
            return await read_event(self.reader)
        except FrameTooLarge as exc:
            raise Fatal(ServiceError(ErrorCode.FRAME_TOO_LARGE, str(exc))) from None
        except BadEvent as exc:
            raise Fatal(ServiceError(ErrorCode.BAD_REQUEST, str(exc))) from None

    @property
    def partial(self) -> bool:
        return self.reader.partial

    def error_bytes(self, key: Hashable, exc: ServiceError) -> bytes:
        return event_bytes(error_event(exc))

    def busy(self) -> bool:
        return bool(self.session.requests) or self.text_job is not None

    def eof_is_disconnect(self) -> bool:
        return True

    def client_gone(self) -> None:
        """Stop every request now, the one running included."""
        self.session.requests.cancel_all("disconnect")
        if self.text_job is not None:
            self.text_job.cancel("disconnect")
        self._wake.set()
        worker = self._worker
        if worker is not None and worker is not asyncio.current_task():
            worker.cancel()  # a request still waiting for its stream stops waiting

    def pending(self) -> list[asyncio.Task[Any]]:
        return [self._worker] if self._worker is not None else []

    # ------------------------------------------------------------ events

    async def dispatch(self, msg: Event) -> None:
        t = msg.type
        if Describe.is_type(t):
            await self.session.send(event_bytes(info_event(self.service)))
        elif Ping.is_type(t):
            text = msg.data.get("text")
            await self.session.send(
                event_bytes(Pong(text=text if isinstance(text, str) else None).event())
            )
        elif Synthesize.is_type(t):
            if self.text_job is None:  # else the compatibility copy of the streamed text
                self._interrupt()
                await self._enqueue(self._job(msg))
        elif SynthesizeStart.is_type(t):
            await self._start_text(msg)
        elif SynthesizeChunk.is_type(t):
            if self.text_job is None:
                await self._out_of_turn(t)
                return
            self._chunk(msg)
        elif SynthesizeStop.is_type(t):
            if self.text_job is None:
                await self._out_of_turn(t)
                return
            req, self.text_job = self.text_job, None
            with contextlib.suppress(ServiceError):  # finished already: nothing more to end
                req.finish()
        else:
            log.debug("wyoming %s: ignoring %r", self.session.whose, t[:64])

    def _interrupt(self) -> None:
        """A new ``synthesize`` while one speaks: barge-in, the one speaking stops now (no
        audio made after this goes out; its ``audio-stop`` says how far it got)."""
        job = self.current
        if job is not None and job.req.stream is not None:
            job.req.cancel(INTERRUPTED)

    async def _start_text(self, msg: Event) -> None:
        if self.text_job is not None:
            exc = ServiceError(ErrorCode.BAD_REQUEST, "a text stream is open")
            await self._enqueue(_Job(self._request(), error=exc))
            return
        job = self._job(msg, self.config.limits.max_text_chars)
        self.text_job = job.req
        if not await self._enqueue(job):
            job.req.refused = ServiceError(ErrorCode.TOO_MANY_REQUESTS, "refused")  # text dropped

    def _chunk(self, msg: Event) -> None:
        """Text for the open stream (a bad chunk ends it with ``bad_request``)."""
        req = self.text_job
        assert req is not None
        try:
            text = chunk_text(msg)
        except ServiceError as exc:
            self.session.report.count(exc.code)
            req.fail(exc)
            req.refused = req.refused or exc  # what still comes for it is dropped
            return
        with contextlib.suppress(ServiceError):  # its failure (text_too_long …) ends its run
            req.add_text(text)

    async def _out_of_turn(self, event_type: str) -> None:
        exc = ServiceError(ErrorCode.BAD_REQUEST, f"{event_type} without synthesize-start")
        await self._enqueue(_Job(self._request(), error=exc))

    def _request(self, text_limit: int | None = None) -> Request:
        self._seq += 1
        return Request(self._seq, "synthesize", text_limit)

    def _job(self, msg: Event, text_limit: int | None = None) -> _Job:
        req = self._request(text_limit)
        try:
            w = self.config.wyoming
            return _Job(req, SynthesizeMessage.from_event(msg, w.text_format, w.text_start))
        except ServiceError as exc:
            self.session.report.count(exc.code)
            req.refused = exc
            return _Job(req, error=exc)

    async def _enqueue(self, job: _Job) -> bool:
        limit = self.config.limits.max_inflight_per_connection
        if len(self.jobs) + (self.current is not None) >= limit:
            exc = ServiceError(ErrorCode.TOO_MANY_REQUESTS, f"at most {limit} requests in flight")
            self.session.report.count(exc.code)
            # Said now, not in turn (the queue it would wait in is what is full), by the
            # reader itself, with back-pressure.
            await self.session.send(self.error_bytes(None, exc))
            return False
        self.session.requests.add(job.req)
        self.jobs.append(job)
        self._wake.set()
        return True

    # ------------------------------------------------------------ requests, in order

    async def _work(self) -> None:
        """Each request in turn; its ending is the frame's (exactly one end or error)."""
        while not self.session.gone:
            if not self.jobs:
                self._wake.clear()
                await self._wake.wait()
                continue
            job = self.current = self.jobs.popleft()
            try:
                await self.session.requests.run(job.req, self._body(job))
            finally:
                self.current = None

    async def _body(self, job: _Job) -> bytes:
        """One request: ServiceError for its error; returns its end's bytes (none when
        it was cancelled: its client is gone)."""
        if job.error is not None:
            raise job.error
        assert job.message is not None
        if job.req.cancel_reason is not None:
            return b""
        try:
            speech = job.message.speech(self.service)
        except ServiceError as exc:
            self.session.report.count(exc.code)
            raise
        stream = await self.service.open_stream(
            speech, door="wyoming", label={"connection": self.session.number}
        )  # its ServiceError is counted by the core
        try:
            refused = job.req.opened(stream)
            if refused is not None:  # its early text went over the limit meanwhile
                raise refused
            return await self._audio(stream, speech.text_stream)
        finally:
            stream.close()  # no-op once it ran

    async def _audio(self, stream: Stream, text_stream: bool) -> bytes:
        """``audio-start``, the chunks; the end's bytes (``audio-stop``, and
        ``synthesize-stopped`` after a text stream)."""
        rate = stream.sample_rate
        encoder = PcmEncoder(rate, rate, "s16le")
        end_ms = 0.0
        sent = SentText()

        async def emit(chunk: Chunk) -> None:
            nonlocal end_ms
            end_ms = chunk.offset_ms + chunk.duration_ms
            audio = encoder(chunk.samples, chunk.final)
            ts = round(chunk.offset_ms)
            event = AudioChunk(rate=rate, width=SAMPLE_WIDTH, channels=1, audio=audio, timestamp=ts)
            await self.session.send(event_bytes(event.event()), grace_s=stream.buffer_s())
            sent.note(chunk)

        start = AudioStart(rate=rate, width=SAMPLE_WIDTH, channels=1, timestamp=0)
        await self.session.send(event_bytes(start.event()))
        result = await stream.run(emit)
        if result.cancelled and stream.cancel_reason != INTERRUPTED:
            return b""  # the client is gone: nothing to tell it
        stop = AudioStop(timestamp=round(end_ms)).event()
        if result.cancelled:
            stop.data[SENT_TEXT_SPAN] = list(sent.span or (0, 0))
        end = event_bytes(stop)
        if text_stream:
            end += event_bytes(SynthesizeStopped().event())
        return end
