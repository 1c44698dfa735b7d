"""One ElevenLabs WebSocket connection's contexts: messages in, messages out, no socket.

:class:`Contexts` takes the client's messages as they arrive (:meth:`Contexts.receive`)
and sends its own through the ``send`` it was given (the door frame's
:meth:`~appliance.doors.frame.session.Session.send`: the output bound and the too-slow
rule; it raises when the client is gone).  Each context is a request of the frame's
:class:`~appliance.doors.frame.requests.Requests` (so the frame waits for it at a
half-close, cancels it when the client goes, and ends it once), running one text
stream on the service core (``SpeechRequest(text_stream=True)``, the same path as protocol
v1's ``text_stream``, so ``elevenlabs.text_start: eager`` applies), with word timings on
for the alignment.

Contexts (``/multi-stream-input``: named by ``context_id``; ``/stream-input``: one):

- the first message naming a context opens it (its ``voice_settings.speed`` applies);
  on ``/multi-stream-input`` an empty ``text`` is a keep-alive and opens nothing;
- ``text`` is appended; ``flush: true`` speaks what is buffered now;
- ``close_context`` after a ``flush`` (nothing written since) ends its text: what was
  written is still spoken, then ``isFinal``.  Otherwise (mid-sentence: an interruption)
  the context is cancelled: its audio stops at once, then ``isFinal``;
- ``/stream-input``: an empty ``text`` ends the text (ElevenLabs' end of stream); the
  socket closes once its audio and ``isFinal`` are sent;
- ``close_socket``: every context's text ends; the socket closes once they are spoken.

Every context that was opened gets exactly one ``isFinal``, after its last audio, whether
it ended, was cancelled or failed (its error message comes first, with its
``contextId``).  A refused message (bad JSON, an unknown field, too many contexts, a
flood) is answered with an error message and the socket closes (code 1008), as
ElevenLabs does.  Bounds: ``elevenlabs.max_contexts`` open at once (and five times as
many running, counting those closed and still ending),
``elevenlabs.max_messages_per_s`` (a burst of twice that), ``limits.max_message_bytes`` a
message, ``limits.max_text_chars`` a context's text (the core's).
"""

from __future__ import annotations

import base64
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol

import numpy as np

from appliance.core.service import SentText, Service, Stream
from appliance.doors.captions import visemes_dict
from appliance.doors.elevenlabs.alignment import Aligner
from appliance.doors.elevenlabs.messages import (
    BadMessage,
    ClientMessage,
    Query,
    audio_message,
    error_message,
    final_message,
)
from appliance.doors.frame.requests import Request, Requests
from appliance.doors.pcm import PcmEncoder
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import ElevenLabsConfig, LimitsConfig
from appliance.speech import Chunk, SpeechRequest

log = logging.getLogger(__name__)

DOOR = "elevenlabs"
SINGLE = "single"
"""The one context of a ``/stream-input`` connection (its messages carry no contextId)."""
DEFAULT_CONTEXT = ""
"""A ``/multi-stream-input`` message without ``context_id``: the connection's default
context (its replies carry ``"contextId": ""``)."""

CLOSING_PER_OPEN = 5
"""Contexts running (open, or closed and still ending) per one ``max_contexts`` allows."""
_numbers = itertools.count(1)


class Send(Protocol):
    """The connection's writer: one message, under its too-slow rule.  With ``live``,
    the message is dropped unless ``live()`` still holds once it is its turn to go out
    (a cancelled context's audio that waited behind another message).  Returns whether
    it was written."""

    def __call__(
        self, msg: dict[str, Any], live: Callable[[], bool] | None = None
    ) -> Awaitable[bool]: ...


class _Context:
    """One context: its text stream, encoder and alignment."""

    def __init__(self, cid: str, stream: Stream, query: Query) -> None:
        self.id = cid
        self.stream = stream
        self.encoder = PcmEncoder(stream.sample_rate, query.rate, query.sample_format)
        self.aligner = Aligner()
        self.sent = SentText()
        """How far in its text the audio sent reaches (for an interrupted context's isFinal)."""
        self.text = ""
        self.flushed = False
        """Flushed with nothing written since: a ``close_context`` ends it, not cancels it."""


class Contexts:
    """The contexts of one connection and the rules of its messages."""

    def __init__(
        self,
        service: Service,
        query: Query,
        multi: bool,
        send: Send,
        requests: Requests,
        cfg: Callable[[], ElevenLabsConfig],
        limits: Callable[[], LimitsConfig],
    ) -> None:
        self.service, self.query, self.multi, self._send = service, query, multi, send
        self.running = requests
        """Every context whose stream runs, as the frame's requests: the open ones and the
        closed ones still ending."""
        self._cfg, self._limits = cfg, limits
        self.number = next(_numbers)
        self._serial = itertools.count()
        self.contexts: dict[str, _Context] = {}
        """Open contexts, by id (a closed one leaves at once: its id may be opened again)."""
        self.closing: tuple[int, str] | None = None
        """Set once the socket is to close: (close code, reason)."""
        self.ending = False
        """No more contexts: the socket closes once the open ones are spoken."""
        self._tokens = 0.0
        self._t_tokens = time.monotonic()

    # -- from the connection

    async def receive(self, raw: str | bytes) -> None:
        """One message from the client.  A refusal sends its error and sets ``closing``."""
        try:
            self._admit(raw)
            msg = ClientMessage.parse(raw)
            await self._apply(msg)
        except BadMessage as exc:
            await self.refuse(exc)

    async def refuse(self, exc: ServiceError) -> None:
        """Send ``exc`` and close the socket (ElevenLabs' 1008)."""
        self.service.record_error(exc.code)
        log.info("elevenlabs: connection %d: %s: %s", self.number, exc.code, exc.message)
        await self._send(error_message(exc, closing=True))
        self.closing = (1008, exc.code)

    def context_id(self, key: Hashable) -> str | None:
        """The ``contextId`` the messages of the request ``key`` (``(id, serial)``) carry
        (None on ``/stream-input``)."""
        assert isinstance(key, tuple)
        return self._cid(str(key[0]))

    # -- inside

    def _admit(self, raw: str | bytes) -> None:
        """Message size and rate (a token bucket of twice the rate a second)."""
        limit = self._limits().max_message_bytes
        if len(raw) > limit:
            raise BadMessage(f"a message may have {limit} bytes", ErrorCode.FRAME_TOO_LARGE)
        rate = self._cfg().max_messages_per_s
        now = time.monotonic()
        self._tokens = max(0.0, self._tokens - (now - self._t_tokens) * rate) + 1.0
        self._t_tokens = now
        if self._tokens > 2 * rate:
            raise BadMessage(f"more than {rate:g} messages a second", ErrorCode.TOO_MANY_REQUESTS)

    async def _apply(self, msg: ClientMessage) -> None:
        if self.ending:
            return  # after close_socket / end of stream: nothing more is taken
        if msg.close_socket:
            self._end_all()
            return
        cid = SINGLE if not self.multi else (msg.context_id or DEFAULT_CONTEXT)
        ctx = self.contexts.get(cid)
        if ctx is None:
            if msg.close_context or (self.multi and not msg.text):
                return  # a keep-alive, or a context already ended: nothing to do
            ctx = await self._open(cid, msg)
            if ctx is None:
                return
        if msg.close_context:
            self._close_context(ctx)
            return
        await self._text(ctx, msg)

    async def _open(self, cid: str, msg: ClientMessage) -> _Context | None:
        cap = self._cfg().max_contexts
        if len(self.contexts) >= cap or len(self.running) >= CLOSING_PER_OPEN * cap:
            raise BadMessage(
                f"at most {cap} contexts may be open on a connection"
                f" ({CLOSING_PER_OPEN * cap} with those closed and still ending)",
                ErrorCode.TOO_MANY_REQUESTS,
            )
        req = SpeechRequest(
            text="",
            text_stream=True,
            voice=self.query.voice,
            speaker=self.query.speaker,
            speed=msg.speed,
            word_timings=True,
            visemes=self.query.visemes,
            text_start=self._cfg().text_start,
        )
        label = {"connection": self.number, "context": cid[:32]}
        try:
            stream = await self.service.open_stream(req, door=DOOR, label=label)
        except ServiceError as exc:
            # Refused (busy, shutting down): this context ends with its error, the socket goes on.
            await self._send(error_message(exc, self._cid(cid)))
            await self._send(final_message(self._cid(cid)))
            return None
        request = Request((cid, next(self._serial)), "context")
        request.opened(stream)
        ctx = self.contexts[cid] = _Context(cid, stream, self.query)
        self.running.start(request, self._run(ctx))
        return ctx

    async def _text(self, ctx: _Context, msg: ClientMessage) -> None:
        text = msg.text or ""
        if not self.multi and msg.text == "":
            self._end_all()  # ElevenLabs' end of stream
            return
        if not ctx.stream.takes_text:
            return  # its text has ended (or failed: its error comes with its final)
        try:
            ctx.stream.append(text, flush=msg.flush)
        except ServiceError as exc:
            await self._send(error_message(exc, self._cid(ctx.id)))
            return
        ctx.text += text
        if msg.flush:
            ctx.flushed = True
        elif text.strip():
            ctx.flushed = False

    def _close_context(self, ctx: _Context) -> None:
        del self.contexts[ctx.id]
        if ctx.flushed and ctx.stream.takes_text:
            ctx.stream.finish()  # what was written is spoken, then isFinal
        else:
            ctx.stream.cancel("cancel")  # an interruption: the audio stops now

    def _end_all(self) -> None:
        self.ending = True
        for ctx in self.contexts.values():
            if ctx.stream.takes_text:
                ctx.stream.finish()

    def _cid(self, cid: str) -> str | None:
        return cid if self.multi else None

    async def _run(self, ctx: _Context) -> None:
        """One context's request body: its stream, its error (if any), then exactly one
        ``isFinal``.  What else it raises ends it through the frame (the client gone:
        nothing; a bug: its error and ``isFinal``, from the wire's ``error_bytes``)."""
        cid = self._cid(ctx.id)
        try:
            sent: tuple[int, int] | None = None
            try:
                result = await ctx.stream.run(lambda chunk: self._emit(ctx, chunk))
                if ctx.stream.cancel_reason is None:
                    tail = ctx.encoder(np.zeros(0, np.float32), True)
                    await self._audio(ctx, tail, ctx.aligner.block())
                elif result.cancelled:
                    sent = ctx.sent.span or (0, 0)
            except ServiceError as exc:
                await self._send(error_message(exc, cid))
            await self._send(final_message(cid, sent))
        finally:
            if self.contexts.get(ctx.id) is ctx:
                del self.contexts[ctx.id]

    async def _emit(self, ctx: _Context, chunk: Chunk) -> None:
        data = ctx.encoder(chunk.samples, False)
        ctx.aligner.add(ctx.text, chunk.words or ())
        alignment = ctx.aligner.block(chunk.offset_ms + chunk.duration_ms)
        if alignment is None and self.query.sync_alignment:
            alignment = {"chars": [], "charStartTimesMs": [], "charDurationsMs": []}
        visemes = visemes_dict(chunk.visemes) if chunk.visemes is not None else None
        if await self._audio(ctx, data, alignment, visemes):
            ctx.sent.note(chunk)

    async def _audio(self, ctx: _Context, data: bytes, alignment: Any, visemes: Any = None) -> bool:
        """Send one audio message unless the context is cancelled by the time its turn
        comes (barge-in: nothing more goes out once the cancel is read); whether it went."""
        if not data and alignment is None and not visemes:
            return False
        audio = base64.b64encode(data).decode("ascii")
        stream = ctx.stream
        return await self._send(
            audio_message(audio, alignment, self._cid(ctx.id), visemes),
            lambda: stream.cancel_reason is None,
        )
