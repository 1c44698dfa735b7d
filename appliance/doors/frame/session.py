"""One connection's life, after it was admitted: reads, dispatch, requests, output, end.

:class:`Session` is the frame; a door gives it a :class:`WireProtocol` (framing, and
what each message does) and a :class:`Channel` (where bytes go: a stream writer here; a
WebSocket for a door that speaks one).  The session then:

- **reads** one message at a time through ``protocol.read()`` under the connection's
  :class:`~appliance.doors.net.ReadTimer`: idle for ``idle_timeout_s`` with nothing in
  flight, the connection is closed; a message begun and not finished within
  ``frame_timeout_s`` is refused with ``bad_request``, as bytes that cannot be a message
  are (:class:`Fatal`: the stream cannot be resynchronised); both are counted, said, and
  the connection closed once the client has read why;
- **dispatches** each message (a bug there ends only what that message was doing, with
  ``internal``), and stops reading while the output is over its bound, unless the
  protocol keeps reading (``reads_while_full``: its sends wait instead);
- **ends** each request once (:class:`~appliance.doors.frame.requests.Requests`): its end
  or error goes out with back-pressure; a request whose client is gone tells nothing;
- **writes** through the connection's :class:`~appliance.doors.net.Outbox`: held under
  ``max_output_buffer_bytes``; a client that reads nothing for ``client_too_slow_s``
  beyond the audio it holds is cut off (:meth:`Session.too_slow`: its request's
  ``client_too_slow`` queued for it to read, the connection closed, and dropped
  ``client_too_slow_s`` later);
- **ends**: at EOF (the client half-closed) text streams end with what they have and
  every answer still goes out, unless the protocol says EOF is a disconnect; then, or
  when the client is gone, the protocol's ``client_gone`` cancels (or keeps) what is in
  flight, and the connection closes (waiting at most 5 s for its requests).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Generic, TypeVar

from appliance.doors.frame.ending import Done, Ending, Failed, Lost, Report
from appliance.doors.frame.requests import Request, Requests
from appliance.doors.net import (
    ClientTooSlow,
    FrameTimeout,
    IdleTimeout,
    Outbox,
    ReadTimer,
    peer_hung_up,
    read_to_eof,
    refuse,
)
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import LimitsConfig

M = TypeVar("M")

_CLOSE_WAIT_S = 5.0
"""How long a closing connection waits for its requests to end (they were cancelled)."""


class Fatal(Exception):
    """Bytes that cannot be read as a message: the client is told why, then closed."""

    def __init__(self, error: ServiceError) -> None:
        super().__init__(error.message)
        self.error = error


class Channel(abc.ABC):
    """Where a connection's bytes go, and how it is closed."""

    transport: asyncio.BaseTransport

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Write now, without waiting (the session bounds what may pile up)."""

    @abc.abstractmethod
    async def drain(self) -> None:
        """Until the transport's buffer is under its limit."""

    @abc.abstractmethod
    def is_closing(self) -> bool: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Close once what is written has gone out."""

    @abc.abstractmethod
    async def refuse(self, payload: bytes) -> None:
        """Answer ``payload``, shut the writing side, close once the client has read it."""

    def hung_up(self) -> bool:
        """The client closed both directions (not only its writing side)."""
        return False


class StreamChannel(Channel):
    """A stream socket's writer (Unix or TCP), and its reader for a refusal's linger."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.transport = writer.transport

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    def is_closing(self) -> bool:
        return self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()
        # A write that failed left its error with the reader, and the error's traceback
        # the frames of that write (the session, the audio being sent): a cycle through
        # this channel that only a collection frees.  Nothing reads the traceback.
        if (exc := self.reader.exception()) is not None:
            exc.__traceback__ = None

    async def refuse(self, payload: bytes) -> None:
        await refuse(self.transport, payload, read_to_eof(self.reader))

    def hung_up(self) -> bool:
        sock = self.writer.get_extra_info("socket")
        return sock is not None and peer_hung_up(sock)


class WireProtocol(abc.ABC, Generic[M]):
    """What a door adds to the frame for one connection: framing and dispatch.

    ``read`` returns the next message (None at EOF) or raises :class:`Fatal`;
    ``partial`` says a message has begun; ``dispatch`` acts on one message, starting
    requests through ``session.requests``; ``error_bytes`` frames an error for the
    request ``key`` (None: the connection's)."""

    reads_while_full: ClassVar[bool] = False
    """Keep reading while the output is over its bound (the protocol's own sends wait)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @abc.abstractmethod
    async def read(self) -> M | None: ...

    @property
    @abc.abstractmethod
    def partial(self) -> bool: ...

    @abc.abstractmethod
    async def dispatch(self, msg: M) -> None: ...

    @abc.abstractmethod
    def error_bytes(self, key: Hashable, exc: ServiceError) -> bytes: ...

    def opened(self) -> None:
        """The connection is admitted and about to be read."""

    def idle_error(self) -> ServiceError | None:
        """What an idle connection is told before it closes (None: it closes silently)."""
        return None

    def dispatch_failed(self, msg: M, exc: ServiceError) -> None:
        """``dispatch`` raised a bug (``exc`` is its ``internal``): said to the client."""
        self.session.write(self.error_bytes(None, exc))

    def busy(self) -> bool:
        """Requests in flight (a silent client is then not idle)."""
        return bool(self.session.requests)

    def client_gone(self) -> None:
        """The client closed, was dropped or stopped reading: nothing reaches it now."""
        self.session.requests.cancel_all("disconnect")

    def eof_is_disconnect(self) -> bool:
        """Whether EOF on read means the client is gone (else: no more requests, every
        answer still goes out)."""
        return False

    def pending(self) -> list[asyncio.Task[Any]]:
        """What the connection waits for when it closes."""
        return self.session.requests.tasks()


class Session:
    """One admitted connection (see the module doc)."""

    def __init__(
        self,
        channel: Channel,
        limits: Callable[[], LimitsConfig],
        report: Report,
        number: int,
        protocol: Callable[[Session], WireProtocol[Any]],
    ) -> None:
        self.channel = channel
        self.number = number
        self.report = report
        self.limits = limits
        self.whose = f"connection {number}"
        self.client: Hashable = ("connection", number)
        """Who the client is once admitted (the gate's :attr:`Admitted.client`: a uid, a
        host): what its slots are counted by, and whose speech v1's ``stop`` silences."""
        self.outbox = Outbox(channel.transport, limits)
        self.timer = ReadTimer(limits)
        self.requests = Requests(self._tell_end, report, self.whose, self.timer.activity)
        self.gone = False
        """The client is gone (closed, dropped, too slow): nothing more is written to it."""
        self._abort = False
        self._closed = False
        self.protocol = protocol(self)

    # ------------------------------------------------------------ the life

    async def serve(self, released: Callable[[], None] = lambda: None) -> None:
        """Read and dispatch until the connection ends; then release it: ``released`` as
        soon as the client is gone (its slot is free then), the close once its work has
        wound down."""
        self.protocol.opened()
        try:
            if await self._read_loop():
                await self._half_closed()
        finally:
            self.leave()
            released()
            pending = self.protocol.pending()
            if pending:
                await asyncio.wait(pending, timeout=_CLOSE_WAIT_S)
            self.close()

    async def _read_loop(self) -> bool:
        """Until EOF (True) or the connection is to close (False)."""
        p = self.protocol
        while not (self._closed or self.gone):
            try:
                msg = await self.timer.read(p.read, lambda: p.partial, p.busy)
            except Fatal as exc:
                await self.fatal(exc.error)
                return False
            except FrameTimeout as exc:
                await self.fatal(ServiceError(ErrorCode.BAD_REQUEST, str(exc)))
                return False
            except IdleTimeout:
                why = p.idle_error()
                if why is not None:
                    await self.fatal(why)
                    return False
                self.report.log.info("%s %s idle: closing", self.report.door, self.whose)
                return False
            except (ConnectionError, OSError):
                return False
            if msg is None:
                return not (p.eof_is_disconnect() or self.gone)
            if not await self._dispatch(msg):
                return False
            if not p.reads_while_full and not await self.room_to_write():
                return False
        return False

    async def _dispatch(self, msg: Any) -> bool:
        """``protocol.dispatch``; False when the connection is to close."""
        try:
            await self.protocol.dispatch(msg)
        except ClientTooSlow:
            self.too_slow(None)
            return False
        except (ConnectionError, OSError):
            return False
        except Exception as exc:  # the boundary of one message: a bug ends only its work
            self.protocol.dispatch_failed(msg, self.report.internal(exc, "dispatch", self.whose))
        return True

    async def _half_closed(self) -> None:
        """EOF: no more requests.  Text streams end with what they have, every answer
        still goes out, then the connection closes.  A client that closed both
        directions is a disconnect: its work stops at once."""
        for r in self.requests:
            r.end_text()
        while self.requests and not (self._closed or self.gone):
            tasks = self.requests.tasks()
            if tasks:
                await asyncio.wait(tasks, timeout=0.1)
            else:
                await asyncio.sleep(0.1)
            if self.requests and self.channel.hung_up():
                return
        with contextlib.suppress(ClientTooSlow, ConnectionError, OSError):
            await self.outbox.guard(self.channel.drain())

    def leave(self) -> None:
        """The client is gone: nothing more is written to it; its work is cancelled (or
        kept: the protocol's ``client_gone``)."""
        if self.gone:
            return
        self.gone = True
        self.protocol.client_gone()

    # ------------------------------------------------------------ output

    def write(self, data: bytes) -> None:
        """Write without waiting: small replies only.  The read loop stops reading while
        the output is over its bound, so these cannot pile up."""
        if self.gone or self._closed or self.channel.is_closing():
            return
        self.channel.write(data)

    async def send(self, data: bytes, grace_s: float = 0.0) -> None:
        """Write with back-pressure: waits while the client's buffer is full.

        ``grace_s`` is how much audio the client still holds: a client playing in real
        time need not read until that has played, so only silence beyond it (and beyond
        ``client_too_slow_s``) makes it too slow (:class:`ClientTooSlow`)."""
        if self.gone or self._closed or self.channel.is_closing():
            raise ConnectionResetError("connection closed")
        self.outbox.apply_limits()
        self.channel.write(data)
        if self.outbox.over_bound:
            await self.outbox.guard(self.channel.drain(), grace_s)

    async def room_to_write(self) -> bool:
        """Stop reading while the output is over its bound; False when the client has not
        read for ``client_too_slow_s`` (the connection is then closed)."""
        self.outbox.apply_limits()
        if self._closed or self.channel.is_closing():
            return False
        if not self.outbox.over_bound:
            return True
        try:
            await self.outbox.guard(self.channel.drain())
        except ClientTooSlow:
            self.too_slow(None)
            return False
        except (ConnectionError, OSError):
            return False
        return True

    async def _tell_end(self, req: Request, ending: Ending[Any]) -> None:
        """How ``req`` ended, to its client (nothing when the client is gone)."""
        if self.gone:
            return
        if isinstance(ending, Lost):
            if ending.too_slow:
                self.too_slow(req.key)
            return
        data = ending.value if isinstance(ending, Done) else None
        if isinstance(ending, Failed):
            data = self.protocol.error_bytes(req.key, ending.error)
        if not data:
            return
        try:
            await self.send(data)
        except ClientTooSlow:
            self.too_slow(None)  # its end was written: the connection's, not the request's
        except (ConnectionError, OSError):
            pass  # gone meanwhile: no one to tell

    def too_slow(self, key: Hashable) -> None:
        """The client read nothing for ``client_too_slow_s`` beyond the audio it held (the
        doors' one rule): request ``key`` (if any) ends with ``client_too_slow``, queued for
        a client that reads again to see why; its other work goes as at a disconnect, and
        the connection is closed once that is read, or dropped ``client_too_slow_s``
        later."""
        if self.gone:
            return
        self.report.log.warning(
            "%s %s: client_too_slow (not reading its output): closing",
            self.report.door,
            self.whose,
        )
        self.report.count(ErrorCode.CLIENT_TOO_SLOW)
        if key is not None:
            err = ServiceError(ErrorCode.CLIENT_TOO_SLOW, "the client stopped reading")
            self.write(self.protocol.error_bytes(key, err))
        self.leave()
        self._abort = True
        if not self._closed and not self.channel.is_closing():
            self.channel.close()  # flushes what it can; the drop below ends the rest
        asyncio.get_running_loop().call_later(self.limits().client_too_slow_s, self.outbox.drop)

    # ------------------------------------------------------------ refusal and close

    async def refuse(self, exc: ServiceError) -> None:
        """The error, then the connection closed once the client has read it."""
        await self.channel.refuse(self.protocol.error_bytes(None, exc))
        self.close()

    async def fatal(self, exc: ServiceError) -> None:
        """What was read cannot be a message: say why (counted), then close."""
        self.report.throttled(
            logging.WARNING,
            f"fatal:{exc.code}",
            "%s %s: %s: %s",
            self.report.door,
            self.whose,
            exc.code,
            exc.message,
        )
        self.report.count(exc.code)
        self.leave()
        await self.refuse(exc)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError, RuntimeError):  # the loop or transport is gone
            if self._abort:
                self.outbox.drop()
            else:
                self.channel.close()
