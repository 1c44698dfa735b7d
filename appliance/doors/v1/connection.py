"""What protocol v1 adds to the door frame for one connection: its framing, and what each
message does.

- **Framing**: a stream of msgpack maps, back to back in any batching, each at most
  ``limits.max_message_bytes`` (:class:`~appliance.doors.v1.protocol.FrameReader`: one
  read adds at most that much to a message begun).  A message over the cap
  (``frame_too_large``) or bytes that are not msgpack (``bad_request``) cannot be
  resynchronised: the frame says why and closes.  A bad *message* (not a map, an unknown
  op, a bad field) is an ``error`` event and the connection goes on.  A message begun
  must be whole within ``limits.frame_timeout_s`` of its first bytes.
- **Requests** (``synthesize``, ``speak``, ``phonemes``, ``info`` …) each run as a
  request of the frame, interleaved, at most ``limits.max_inflight_per_connection`` at
  once (beyond: ``too_many_requests``); an id already in flight is ``duplicate_id``;
  while the daemon stops, ``shutting_down``.  What each does is
  :mod:`appliance.doors.v1.bodies`'s; its one ``end`` or ``error`` is the frame's.
- **Control** (no request of its own): ``cancel`` (answered ``cancelled``), ``append``
  and ``finish`` (no answer on success).  Text for a text stream still being opened is
  held by the frame's request (in characters, at most ``limits.max_text_chars``).  An
  error about a message that is not its request's end says ``refused: true``.
- **A client gone** (closed, dropped, too slow): its ``synthesize`` requests are
  cancelled; its ``speak`` requests play on (speech outlives its client; ``cancel`` and
  ``stop`` end it), at most ``limits.max_inflight_per_connection`` per user
  (:meth:`V1Host.detach`).  A half-closed client (EOF) sends no more requests but gets
  every answer.

The frame (:class:`~appliance.doors.frame.session.Session`) owns the rest: read
timeouts, the output bound and ``client_too_slow``, a bug's ``internal``, refusal and
close.  Nothing here needs a socket: the bytes come from any ``asyncio.StreamReader``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack

from appliance.core.service import Service
from appliance.doors.frame.requests import Request
from appliance.doors.frame.session import Fatal, Session, WireProtocol
from appliance.doors.pace import PacedSends
from appliance.doors.v1.bodies import Bodies
from appliance.doors.v1.protocol import (
    AppendRequest,
    CancelRequest,
    ErrorEvent,
    FinishRequest,
    FrameReader,
    PhonemesRequest,
    SimpleEvent,
    SimpleRequest,
    SynthesizeRequest,
    pack,
    parse_request,
    request_id_of,
)
from appliance.errors import ErrorCode, ServiceError

log = logging.getLogger("appliance.doors.v1.server")

_STREAM_OPS = ("synthesize", "speak")
"""The requests ``cancel`` can end."""


class V1Host(Protocol):
    """What a connection needs of its door (:class:`~appliance.doors.v1.server.V1Door`)."""

    service: Service
    paced: PacedSends

    def detach(self, key: Hashable, task: asyncio.Task[None]) -> bool:
        """Let a ``speak`` play on after its client has gone (False: its user has too many)."""


@dataclass(frozen=True)
class Message:
    """One decoded msgpack object (``value`` may be anything, nil included: the read
    loop's None is EOF)."""

    value: Any


class V1Protocol(WireProtocol[Message]):
    """One protocol v1 connection (see the module doc)."""

    def __init__(self, session: Session, host: V1Host, reader: asyncio.StreamReader) -> None:
        super().__init__(session)
        self.host = host
        self.service = host.service
        self.reader = reader
        self.frames = FrameReader(self.service.runtime.config.limits.max_message_bytes)
        self.bodies = Bodies(session, self.service, host.paced)
        self.detached: set[Hashable] = set()
        """Requests (``speak``) playing on after their client has gone."""

    # ------------------------------------------------------------ framing

    async def read(self) -> Message | None:
        """The next whole message; None at EOF (a message begun is dropped)."""
        while True:
            try:
                whole, value = self.frames.next_message()
            except ServiceError as exc:  # frame_too_large
                raise Fatal(exc) from None
            except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:
                msg = f"malformed msgpack ({type(exc).__name__})"
                raise Fatal(ServiceError(ErrorCode.BAD_REQUEST, msg)) from None
            if whole:
                return Message(value)
            if self.frames.partial:
                self.session.timer.began()  # a message begun is whole within frame_timeout_s
            # At most what the frame reader can take on top of a message begun.
            data = await self.reader.read(self.frames.read_size)
            if not data:
                return None
            self.frames.feed(data)

    @property
    def partial(self) -> bool:
        return self.frames.partial

    def error_bytes(self, key: Hashable, exc: ServiceError) -> bytes:
        rid = key if isinstance(key, int) else None
        return pack(ErrorEvent.from_exc(rid, exc).to_dict())

    # ------------------------------------------------------------ messages

    async def dispatch(self, msg: Message) -> None:
        try:
            req = parse_request(msg.value)
        except ServiceError as exc:
            rid = request_id_of(msg.value)
            self.error(rid, exc, refused=rid in self.session.requests)
            return
        if isinstance(req, CancelRequest):
            self._cancel(req)
        elif isinstance(req, AppendRequest | FinishRequest):
            self._text(req)
        else:
            self._start(req)

    def dispatch_failed(self, msg: Message, exc: ServiceError) -> None:
        """A bug handling ``msg``: its request ends with ``internal``, unless a live
        request has its id (that one goes on: the error would not be its end)."""
        rid = request_id_of(msg.value)
        if rid in self.session.requests:
            rid = None
        self.session.write(self.error_bytes(rid, exc))

    def _start(self, req: SimpleRequest | SynthesizeRequest | PhonemesRequest) -> None:
        requests = self.session.requests
        limit = self.service.runtime.config.limits.max_inflight_per_connection
        if req.id in requests:
            # The live request with this id goes on: this error is about the refused
            # message only, and says so.
            msg = f"id {req.id} is already in flight"
            self.error(req.id, ServiceError(ErrorCode.DUPLICATE_ID, msg), refused=True)
        elif self.service.stopping:
            self.error(req.id, ServiceError(ErrorCode.SHUTTING_DOWN, "shutting down"))
        elif len(requests) >= limit:
            msg = f"at most {limit} requests in flight"
            self.error(req.id, ServiceError(ErrorCode.TOO_MANY_REQUESTS, msg))
        else:
            text_stream = isinstance(req, SynthesizeRequest) and req.text_stream
            text_limit = self.service.runtime.config.limits.max_text_chars if text_stream else None
            r = Request(req.id, req.op, text_limit)
            requests.start(r, self._body(req, r))

    def _body(
        self, req: SimpleRequest | SynthesizeRequest | PhonemesRequest, r: Request
    ) -> Awaitable[bytes]:
        if isinstance(req, SynthesizeRequest):
            return self.bodies.synthesize(req, r)
        if isinstance(req, PhonemesRequest):
            return self.bodies.phonemes(req)
        return self.bodies.simple(req)

    def _cancel(self, req: CancelRequest) -> None:
        target = self.session.requests.get(req.target)
        if target is None or target.op not in _STREAM_OPS:
            exc = ServiceError(ErrorCode.BAD_REQUEST, f"no request {req.target} in flight")
            self.error(req.id, exc, refused=req.id in self.session.requests)
            return
        target.cancel("cancel")
        self.session.write(pack(SimpleEvent(req.id, "cancelled", {"target": req.target}).to_dict()))

    def _text(self, req: AppendRequest | FinishRequest) -> None:
        """``append`` / ``finish``: no answer on success; an error says which."""
        r = self.session.requests.get(req.target)
        if r is not None and r.stream is None and r.early is not None:
            # Still being admitted and prepared: held, handed to the stream once open.
            self._to(r, req)
            return
        if r is None or r.stream is None or not r.stream.takes_text:
            msg = f"{req.target} is not an open text stream"
            self.error(None, ServiceError(ErrorCode.BAD_REQUEST, msg), refused=True)
            return
        try:
            self._to(r, req)
        except Exception as exc:  # the boundary of the stream's text: a bug ends that stream
            r.fail(self.session.report.internal(exc, "text", self.session.whose))  # via its run

    def _to(self, r: Request, req: AppendRequest | FinishRequest) -> None:
        """``req`` applied to its request (held text, or its open stream)."""
        try:
            if isinstance(req, AppendRequest):
                r.add_text(req.text, flush=req.flush)
            else:
                r.finish()
        except ServiceError as exc:
            self.error(req.target, exc, refused=True)

    def error(self, rid: int | None, exc: ServiceError, refused: bool = False) -> None:
        """An error event written now (counted): a message's refusal (``refused``: not
        the end of request ``rid``, which goes on) or a request that never started."""
        self.session.report.count(exc.code)
        ev = ErrorEvent.from_exc(rid, exc)
        if refused:
            ev = ErrorEvent(ev.id, ev.code, ev.message, {**ev.extra, "refused": True})
        self.session.write(pack(ev.to_dict()))

    # ------------------------------------------------------------ the client gone

    def client_gone(self) -> None:
        """What the client asked to be spoken on the device plays on (a text stream of it
        ends with the text it has, as on a half-close); ``cancel`` and ``stop`` are how a
        client silences it.  Everything else (audio streamed back) has no one to go to:
        cancelled now."""
        for r in self.session.requests:
            if r.key in self.detached:
                continue
            if r.op == "speak" and r.task is not None and not r.task.done():
                if self.host.detach(self.session.client, r.task):
                    self.detached.add(r.key)
                    r.end_text()
                    continue
                log.info(
                    "%s: speak %s cancelled: its user already has %d requests speaking"
                    " after their clients left",
                    self.session.whose,
                    r.key,
                    self.service.runtime.config.limits.max_inflight_per_connection,
                )
            r.cancel("disconnect")

    def pending(self) -> list[asyncio.Task[Any]]:
        """What the connection waits for at close: not the speech that plays on."""
        requests = self.session.requests
        return [r.task for r in requests if r.task is not None and r.key not in self.detached]
