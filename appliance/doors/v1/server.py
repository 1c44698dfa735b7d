"""Protocol v1 over a Unix socket: framing, peer checks, limits and dispatch.

A door like the others (:class:`appliance.core.service.Door`), run by the daemon:
``start`` (bind, or adopt an activated socket), ``close_listener`` (the drain begins: a
socket we made stays open, and a newcomer is answered ``shutting_down`` and closed, not
refused by the kernel; on an activated one it waits for the next daemon), ``wait_idle``
(paced frames still on the clock go out until the drain's deadline, then end with
``shutting_down``), ``close`` (the listener, the connections left, and the socket file we
made — only if it is still ours).  Connection policy (peers,
slots, timeouts, the output bound, refusals) is :mod:`appliance.doors.net`'s.

Each connection is one :class:`Connection` whose ``handle`` reads frames and
dispatches; every request runs as its own task, kept in a dict with a done-callback.
A bad frame is an error event, not the end of the connection; only bytes that cannot
be decoded as msgpack close it.  What a request *does* lives in the service core
(:mod:`appliance.core.service`); this module only maps protocol v1 onto it.

Bounds: the output of a connection is held under ``max_output_buffer_bytes`` on every
path (error replies included): past it the connection is not read until the client
reads, and is closed after ``client_too_slow_s``.  A half-closed client (EOF on read)
sends no more requests but still gets every answer.  Messages may come back to back in any
batching: each is capped (:class:`~appliance.doors.v1.protocol.FrameReader`), not a read.
Text appended to a text stream before it is open is held in characters, up to
``limits.max_text_chars`` however many messages bring it (more ends the request with
``text_too_long``, as it would once open: :class:`EarlyText`).

A client that goes away (closed, dropped, too slow) has its ``synthesize`` requests cancelled;
its ``speak`` requests play on (speech outlives its client; ``cancel`` and ``stop`` end it).
Any exception on a request's path ends that request with its one ``error`` (``internal``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import logging
import os
import socket
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from appliance.core.runtime import Runtime
from appliance.core.service import Service, Stream
from appliance.doors.net import (
    ClientSlots,
    ClientTooSlow,
    FrameTimeout,
    IdleTimeout,
    Outbox,
    Peer,
    ReadTimer,
    authorize_peer,
    bind_unix_socket,
    peer_hung_up,
    peer_of,
    privileged,
    quiet_accept_errors,
    raise_fd_limit,
    read_to_eof,
    refuse,
    remove_own_socket,
)
from appliance.doors.pace import PacedFrame, PacedSends, Pacer
from appliance.doors.pcm import PcmEncoder
from appliance.doors.v1.protocol import (
    AppendRequest,
    CancelRequest,
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    FinishRequest,
    FrameReader,
    PhonemesRequest,
    SimpleEvent,
    SimpleRequest,
    StartEvent,
    SynthesizeRequest,
    pack,
    parse_request,
    request_id_of,
)
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config
from appliance.ops.logsetup import Throttle
from appliance.ops.paths import prepare_socket_dir
from appliance.speech import Chunk

__all__ = ["Connection", "Server"]

log = logging.getLogger(__name__)

_READ_SIZE = 65536
_THROTTLE = Throttle()
"""Log lines about one client's bad or failing requests: one per kind every 10 s."""


@dataclass
class EarlyText:
    """Text for a text stream that is still being admitted and prepared, held until it is
    open: in characters (at most ``limit``, however many appends bring it), the last
    ``flush`` among them, and ``finish``.  Applied as one append (two with a flush), so a
    flood of empty appends holds nothing."""

    limit: int
    chars: int = 0
    flush_at: int = -1
    """Characters up to the last ``flush`` (-1: none)."""
    finished: bool = False
    error: ServiceError | None = None
    """Set when the text went over ``limit``: the request ends with it once open."""
    _buf: io.StringIO = field(default_factory=io.StringIO)

    def add(self, req: AppendRequest | FinishRequest) -> None:
        """Hold ``req``; raises ServiceError (the refusal an open stream would give) for
        text after ``finish``."""
        if self.finished:
            raise ServiceError(ErrorCode.BAD_REQUEST, "the text of this request is finished")
        if isinstance(req, FinishRequest):
            self.finished = True
            return
        if self.error is not None:
            return  # the request ends with text_too_long once open: nothing more to keep
        if self.chars + len(req.text) > self.limit:
            self.error = ServiceError(
                ErrorCode.TEXT_TOO_LONG,
                f"text would have more than {self.limit} characters; the limit is {self.limit}",
            )
            self._buf = io.StringIO()  # nothing of it will be spoken
            return
        self._buf.write(req.text)
        self.chars += len(req.text)
        if req.flush:
            self.flush_at = self.chars

    def held(self, target: int) -> list[AppendRequest | FinishRequest]:
        """What to hand the stream once open, in order (nothing when it is to fail)."""
        if self.error is not None:
            return []
        text = self._buf.getvalue()
        cut = max(self.flush_at, 0)
        out: list[AppendRequest | FinishRequest] = []
        if self.flush_at >= 0:
            out.append(AppendRequest(target, text[:cut], flush=True))
        if text[cut:]:
            out.append(AppendRequest(target, text[cut:]))
        if self.finished:
            out.append(FinishRequest(target))
        return out


@dataclass
class RequestState:
    id: int
    op: str
    task: asyncio.Task[None] | None = None
    stream: Stream | None = None
    cancel_reason: str | None = None
    text_stream: bool = False
    early_text: EarlyText | None = None
    """Text that arrived while the stream was still being opened."""
    detached: bool = False
    """A ``speak`` playing on after its client has gone (see ``Connection._client_gone``)."""

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.stream is not None:
            self.stream.cancel(reason)


class Server:
    def __init__(
        self,
        service: Service,
        socket_path: Path,
        activated: socket.socket | None = None,
    ) -> None:
        self.service = service
        self.socket_path = socket_path
        self._activated = activated
        self._server: asyncio.AbstractServer | None = None
        self._socket_gid: int | None = None
        self._socket_id: tuple[int, int] | None = None
        self.connections: set[Connection] = set()
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self.detached: dict[Hashable, set[asyncio.Task[None]]] = {}
        """``speak`` requests whose client has gone, by user: they play on (bounded)."""
        self.slots = ClientSlots()
        self.paced = PacedSends()
        """Paced requests whose frames are still on the clock (the drain waits for them)."""
        self.draining = False
        """The daemon is stopping: newcomers are answered ``shutting_down``."""
        self._conn_seq = 0
        self.service.add_door(self.name, lambda: len(self.connections))

    name = "protocol-v1"

    @property
    def runtime(self) -> Runtime:
        return self.service.runtime

    @property
    def config(self) -> Config:
        """Read on every use: a SIGHUP reload reaches connections already open."""
        return self.service.runtime.config

    # ------------------------------------------------------------ start-up

    async def start(self) -> None:
        cfg = self.config.v1
        quiet_accept_errors(asyncio.get_running_loop())
        raise_fd_limit(self.config)
        if self._activated is not None:
            sock = self._activated
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(self._accept, sock=sock)
            with contextlib.suppress(OSError):
                self._socket_gid = os.fstat(sock.fileno()).st_gid
                name = sock.getsockname()
                if isinstance(name, str) and name:
                    self._socket_gid = os.stat(name).st_gid
            log.info("serving on an activated socket")
            return
        path = self.socket_path
        prepare_socket_dir(path)  # the per-user default: 0700, ours, not a symlink
        self._server, st = await bind_unix_socket(
            path,
            cfg.socket_mode,
            lambda p: asyncio.start_unix_server(self._accept, path=p, limit=_READ_SIZE),
        )
        self._socket_gid = st.st_gid
        self._socket_id = (st.st_dev, st.st_ino)
        log.info("listening on %s (mode %o)", path, cfg.socket_mode)

    # ------------------------------------------------------------ serve

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conn_seq += 1
        conn = Connection(self, reader, writer, self._conn_seq)
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        task.add_done_callback(self._conn_tasks.discard)
        await conn.handle()

    async def authorize(self, peer: Peer | None) -> str | None:
        """None if the peer may connect, else the reason it may not."""
        return await authorize_peer(peer, self.config.v1, self._socket_gid)

    def detach(self, key: Hashable, task: asyncio.Task[None]) -> bool:
        """Let a ``speak`` request play on after its client has gone; False when this user
        already has ``max_inflight_per_connection`` such requests (it is then cancelled, so
        connecting, queueing and leaving in a loop cannot pile up speech without bound)."""
        held = self.detached.setdefault(key, set())
        if len(held) >= self.config.limits.max_inflight_per_connection:
            return False
        held.add(task)

        def done(t: asyncio.Task[None]) -> None:
            held.discard(t)
            if not held and self.detached.get(key) is held:
                del self.detached[key]

        task.add_done_callback(done)
        return True

    # ------------------------------------------------------------ shutdown

    async def wait_idle(self, deadline: float) -> None:
        """Paced frames outlive the core's stream: they go out until ``deadline``, then
        each request still sending ends with ``shutting_down``."""
        for _ in range(await self.paced.drain(deadline)):
            self.service.record_error(ErrorCode.SHUTTING_DOWN)

    def close_listener(self) -> None:
        """The drain begins.  A socket we made stays open so that a newcomer is told why
        (``shutting_down``) rather than refused by the kernel; :meth:`close` shuts it.  An
        activated one is no longer accepted on: systemd holds it, so a newcomer waits in
        its backlog for the next daemon (ttsd.socket), which serves it."""
        self.draining = True
        if self._activated is not None and self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """After the core has drained (see :class:`appliance.core.service.Door`): the
        listener and the connections left are closed, and the socket file removed if it
        is still ours."""
        self.draining = True
        if self._server is not None:
            self._server.close()
        for c in list(self.connections):
            c.close()
        waiting = [*self._conn_tasks, *(t for ts in self.detached.values() for t in ts)]
        if waiting:
            await asyncio.wait(waiting, timeout=2.0)
        self.remove_socket()

    def remove_socket(self) -> None:
        """Remove the socket file only if it is still the one we bound (a daemon started
        after us may have replaced it)."""
        if self._activated is None and self._socket_id is not None:
            remove_own_socket(self.socket_path, self._socket_id)


class Connection:
    def __init__(
        self,
        server: Server,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        number: int,
    ) -> None:
        self.server = server
        self.service = server.service
        self.reader = reader
        self.writer = writer
        self.number = number
        self.requests: dict[int, RequestState] = {}
        self.peer: Peer | None = None
        self.client_key: Hashable = ("conn", number)
        """Whose speech ``stop`` silences: the peer's uid once known, so ``ttsctl stop``
        from another process of the same user stops what ``ttsctl say`` started."""
        self._closed = False
        self._abort = False
        self.outbox = Outbox(writer.transport, lambda: self.cfg.limits)
        self.timer = ReadTimer(lambda: self.cfg.limits)

    @property
    def cfg(self) -> Config:
        return self.server.config

    # ------------------------------------------------------------ the handler

    async def handle(self) -> None:
        srv = self.server
        sock = self.writer.get_extra_info("socket")
        self.peer = peer_of(sock) if sock is not None else None
        reason = await srv.authorize(self.peer)
        if reason is not None:
            log.warning("refused connection: %s", reason)
            await self._refuse(ServiceError(ErrorCode.UNAUTHORIZED, reason))
            return
        uid = self.peer.uid if self.peer else -1
        if self.peer is not None:
            self.client_key = ("uid", self.peer.uid)
        refused = srv.slots.admit(self.cfg.limits, len(srv.connections), uid, privileged(self.peer))
        if refused is not None:
            await self._refuse(refused)
            return
        if srv.draining:  # holding its slot while it lingers: a flood stays bounded
            self.service.record_error(ErrorCode.SHUTTING_DOWN)
            try:
                await self._refuse(ServiceError(ErrorCode.SHUTTING_DOWN, "shutting down"))
            finally:
                srv.slots.give_back(uid)
            return
        srv.connections.add(self)
        try:
            if await self._read_loop():
                await self._finish_half_closed(sock)
        finally:
            srv.connections.discard(self)
            srv.slots.give_back(uid)
            self._client_gone()
            tasks = [
                r.task for r in self.requests.values() if r.task is not None and not r.detached
            ]
            if tasks:
                await asyncio.wait(tasks, timeout=5.0)
            self.close()

    def _client_gone(self) -> None:
        """The client closed, was dropped or stopped reading.  What it asked to be spoken
        on the device plays on (a text stream of it ends with the text it has, as on a
        half-close); ``cancel`` and ``stop`` are how a client silences it.  Everything
        else (audio streamed back to it) has no one to go to: cancelled now."""
        for r in list(self.requests.values()):
            if r.detached:
                continue
            if r.op == "speak" and r.task is not None and not r.task.done():
                if self.server.detach(self.client_key, r.task):
                    r.detached = True
                    self._end_text(r)
                    continue
                log.info(
                    "connection %d: speak %d cancelled: its user already has %d requests"
                    " speaking after their clients left",
                    self.number,
                    r.id,
                    self.cfg.limits.max_inflight_per_connection,
                )
            r.cancel("disconnect")

    def _end_text(self, r: RequestState) -> None:
        """No more text comes for ``r``: a text stream ends with what it has."""
        if r.stream is not None and r.stream.takes_text:
            with contextlib.suppress(ServiceError):
                r.stream.finish()
        elif r.text_stream and r.stream is None:
            with contextlib.suppress(ServiceError):  # finished already
                self._early(r).add(FinishRequest(r.id))

    def _early(self, r: RequestState) -> EarlyText:
        if r.early_text is None:
            r.early_text = EarlyText(self.cfg.limits.max_text_chars)
        return r.early_text

    async def _refuse(self, exc: ServiceError) -> None:
        """The error, then the connection closed once the client has read it."""
        payload = pack(ErrorEvent.from_exc(None, exc).to_dict())
        await refuse(self.writer.transport, payload, read_to_eof(self.reader))
        self.close()

    async def _finish_half_closed(self, sock: socket.socket | None) -> None:
        """EOF on read means "no more requests": text streams end with what they have,
        every answer still goes out, then the connection closes.  A client that closed
        both directions is a disconnect: its work stops at once."""
        for r in list(self.requests.values()):
            self._end_text(r)
        while self.requests and not self._closed:
            tasks = [r.task for r in self.requests.values() if r.task is not None]
            await asyncio.wait(tasks, timeout=0.1)
            if sock is not None and self.requests and peer_hung_up(sock):
                return
        with contextlib.suppress(ClientTooSlow, ConnectionError, OSError):
            await self.outbox.guard(self.writer.drain())

    async def _read_loop(self) -> bool:
        """Read and dispatch until EOF (returns True) or a disconnect / fatal frame."""
        frames = FrameReader(self.cfg.limits.max_message_bytes)
        while True:
            data = await self._read_some(frames)
            if data is None:
                return False
            if not data:
                return True
            frames.feed(data)
            while True:
                try:
                    whole, msg = frames.next_message()
                except ServiceError as exc:  # frame_too_large
                    await self._send_now(ErrorEvent.from_exc(None, exc).to_dict())
                    return False
                except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:
                    # The byte stream cannot be resynchronised: say why, then close.
                    await self._send_now(
                        ErrorEvent(
                            None, ErrorCode.BAD_REQUEST, f"malformed msgpack ({type(exc).__name__})"
                        ).to_dict()
                    )
                    return False
                if not whole:
                    break
                self._dispatch_guarded(msg)
                if not await self._room_to_write():
                    return False

    async def _read_some(self, frames: FrameReader) -> bytes | None:
        """The next bytes (b"" at EOF), or None when the connection is to be closed: a
        message begun and not finished within ``frame_timeout_s``, idle for
        ``idle_timeout_s``, or a read error."""
        try:
            # At most what the frame reader can take on top of a message begun.
            return await self.timer.read(
                lambda: self.reader.read(frames.read_size),
                partial=lambda: frames.partial,
                busy=lambda: bool(self.requests),
            )
        except FrameTimeout as exc:
            await self._send_now(ErrorEvent(None, ErrorCode.BAD_REQUEST, str(exc)).to_dict())
        except IdleTimeout:
            log.info("connection %d idle: closing", self.number)
        except (ConnectionError, OSError):
            pass
        return None

    async def _room_to_write(self) -> bool:
        """Stop reading while the output is over its bound; False when the client has not
        read for ``client_too_slow_s`` (the connection is then closed)."""
        self.outbox.apply_limits()
        if self._closed or self.writer.is_closing():
            return False
        if not self.outbox.over_bound:
            return True
        try:
            await self.outbox.guard(self.writer.drain())
        except ClientTooSlow:
            self._too_slow(None)
            return False
        except (ConnectionError, OSError):
            return False
        return True

    def _dispatch_guarded(self, msg: Any) -> None:
        """``_dispatch``, with a bug in it ending only the message it was handling."""
        try:
            self._dispatch(msg)
        except Exception as exc:
            rid = request_id_of(msg)
            state = self.requests.get(rid) if rid is not None else None
            if state is not None and state.task is not None:
                rid = None  # a live request by this id goes on: not its terminal event
            elif state is not None:
                del self.requests[state.id]  # registered, never started: it ends here
            self._internal(rid, exc, "dispatch")

    def _internal(self, rid: int | None, exc: BaseException, where: str) -> None:
        """A request's path raised what it should not have: the request (if any) ends
        with ``internal``; the log has the traceback once, then one line per 10 s."""
        _THROTTLE.log(
            log,
            logging.ERROR,
            f"internal:{where}",
            "connection %d: %s failed (%s): request %s ends with internal",
            self.number,
            where,
            type(exc).__name__,
            rid,
            exc_info=exc,
        )
        self._error_soon(rid, ServiceError(ErrorCode.INTERNAL, f"internal error ({where})"))

    def _dispatch(self, msg: Any) -> None:
        try:
            req = parse_request(msg)
        except ServiceError as exc:
            self._error_soon(request_id_of(msg), exc, refused=request_id_of(msg) in self.requests)
            return
        if isinstance(req, CancelRequest):
            self._cancel(req)
            return
        if isinstance(req, AppendRequest | FinishRequest):
            self._text(req)
            return
        if req.id in self.requests:
            # The live request with this id goes on: this error is about the refused
            # message only, and says so.
            self._error_soon(
                req.id,
                ServiceError(ErrorCode.DUPLICATE_ID, f"id {req.id} is already in flight"),
                refused=True,
            )
            return
        if self.service.stopping:
            self._error_soon(req.id, ServiceError(ErrorCode.SHUTTING_DOWN, "shutting down"))
            return
        limit = self.cfg.limits.max_inflight_per_connection
        if len(self.requests) >= limit:
            self._error_soon(
                req.id,
                ServiceError(ErrorCode.TOO_MANY_REQUESTS, f"at most {limit} requests in flight"),
            )
            return
        state = RequestState(req.id, req.op)
        state.text_stream = isinstance(req, SynthesizeRequest) and req.text_stream
        self.requests[req.id] = state
        coro = (
            self._synthesize(req, state)
            if isinstance(req, SynthesizeRequest)
            else self._phonemes(req)
            if isinstance(req, PhonemesRequest)
            else self._simple(req)
        )
        task = asyncio.create_task(coro)
        state.task = task
        task.add_done_callback(functools.partial(self._request_finished, req.id))

    def _request_finished(self, rid: int, _task: asyncio.Task[None]) -> None:
        self.requests.pop(rid, None)
        self.timer.activity()

    def _error_soon(self, rid: int | None, exc: ServiceError, refused: bool = False) -> None:
        self.service.record_error(exc.code)
        ev = ErrorEvent.from_exc(rid, exc)
        if refused:
            ev = ErrorEvent(ev.id, ev.code, ev.message, {**ev.extra, "refused": True})
        self._write(ev.to_dict())

    # ------------------------------------------------------------ output

    def _write(self, msg: dict[str, Any]) -> None:
        """Write without waiting: small replies only.  The read loop stops reading while
        the output is over its bound, so these cannot pile up."""
        if self._closed or self.writer.is_closing():
            return
        self.writer.write(pack(msg))

    async def _send_now(self, msg: dict[str, Any]) -> None:
        """Write and drain briefly (used just before closing)."""
        self._write(msg)
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            async with asyncio.timeout(1.0):
                await self.writer.drain()

    async def send(self, msg: dict[str, Any], grace_s: float = 0.0) -> None:
        """Write with back-pressure: waits while the client's buffer is full.

        ``grace_s`` is how much audio the client still holds: a client playing in real
        time need not read until that has played, so only silence beyond it (and beyond
        ``client_too_slow_s``) makes it too slow.
        """
        if self._closed or self.writer.is_closing():
            raise ConnectionResetError("connection closed")
        self.outbox.apply_limits()
        self.writer.write(pack(msg))
        if self.outbox.over_bound:
            await self.outbox.guard(self.writer.drain(), grace_s)

    def _too_slow(self, rid: int | None) -> None:
        """The client read nothing for ``client_too_slow_s`` beyond the audio it held (the
        doors' one rule): ``rid`` ends with ``client_too_slow`` (queued, for a client that
        reads again to see why), its other work as at a disconnect, and the connection is
        closed once that is read, or dropped after ``client_too_slow_s`` more."""
        log.warning("connection %d: client_too_slow (not reading its output): closing", self.number)
        self.service.record_error(ErrorCode.CLIENT_TOO_SLOW)
        if rid is not None:
            self._write(
                ErrorEvent(rid, ErrorCode.CLIENT_TOO_SLOW, "the client stopped reading").to_dict()
            )
        self._client_gone()
        self._abort = True
        if not self._closed and not self.writer.is_closing():
            self.writer.close()  # flushes what it can; the drop below ends the rest
        asyncio.get_running_loop().call_later(self.cfg.limits.client_too_slow_s, self.outbox.drop)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            if self._abort:
                self.outbox.drop()
            else:
                self.writer.close()

    # ------------------------------------------------------------ ops

    def _cancel(self, req: CancelRequest) -> None:
        target = self.requests.get(req.target)
        if target is None or target.op not in ("synthesize", "speak"):
            self._error_soon(
                req.id,
                ServiceError(ErrorCode.BAD_REQUEST, f"no request {req.target} in flight"),
                refused=req.id in self.requests,
            )
            return
        target.cancel("cancel")
        self._write(SimpleEvent(req.id, "cancelled", {"target": req.target}).to_dict())

    def _text(self, req: AppendRequest | FinishRequest) -> None:
        """``append`` / ``finish``: no reply on success; an error says which."""
        state = self.requests.get(req.target)
        if state is not None and state.text_stream and state.stream is None:
            # Still being admitted and prepared: held in characters (EarlyText), handed to
            # the stream once open.
            try:
                self._early(state).add(req)
            except ServiceError as exc:
                self._error_soon(req.target, exc, refused=True)
            return
        stream = state.stream if state is not None else None
        if stream is None or not stream.takes_text:
            self._error_soon(
                None,
                ServiceError(ErrorCode.BAD_REQUEST, f"{req.target} is not an open text stream"),
                refused=True,
            )
            return
        self._to_stream(stream, req)

    def _to_stream(self, stream: Stream, req: AppendRequest | FinishRequest) -> None:
        """``req`` applied to its open text stream; an error says why."""
        try:
            if isinstance(req, AppendRequest):
                stream.append(req.text, flush=req.flush)
            else:
                stream.finish()
        except ServiceError as exc:
            self._error_soon(req.target, exc, refused=True)
        except Exception as exc:
            # The stream's text handling broke: the stream ends with internal (its one
            # terminal event comes from its own task).
            _THROTTLE.log(
                log,
                logging.ERROR,
                "internal:text",
                "text of stream %d failed",
                stream.number,
                exc_info=exc,
            )
            stream.fail(ServiceError(ErrorCode.INTERNAL, "internal error (text)"))

    async def _phonemes(self, req: PhonemesRequest) -> None:
        try:
            fmt = req.text_format or self.service.runtime.config.v1.text_format
            result = await self.service.phonemes(req.text, req.voice, fmt)
            await self.send(SimpleEvent(req.id, "phonemes", result).to_dict())
        except ServiceError as exc:
            self._error_soon(req.id, exc)
        except (ClientTooSlow, ConnectionError, OSError):
            return
        except Exception as exc:
            self._internal(req.id, exc, "phonemes")

    async def _simple(self, req: SimpleRequest) -> None:
        svc = self.service
        op = req.op
        try:
            if op == "ping":
                # ``warm``: a request now is as quick as any later one (issue 42).
                await self.send(SimpleEvent(req.id, "pong", {"warm": svc.warm}).to_dict())
            elif op == "info":
                await self.send(SimpleEvent(req.id, "info", svc.info()).to_dict())
            elif op == "stats":
                await self.send(SimpleEvent(req.id, "stats", svc.stats()).to_dict())
            elif op == "health":
                await self.send(SimpleEvent(req.id, "health", svc.health()).to_dict())
            elif op == "warmup":
                await svc.warmup()
                await self.send(SimpleEvent(req.id, "ok").to_dict())
            elif op == "stop":
                svc.stop_speech(self.client_key)
                await self.send(SimpleEvent(req.id, "ok").to_dict())
        except ServiceError as exc:
            self._error_soon(req.id, exc)
        except (ClientTooSlow, ConnectionError, OSError):
            return
        except Exception as exc:
            self._internal(req.id, exc, op)

    async def _synthesize(self, req: SynthesizeRequest, state: RequestState) -> None:
        speak = req.op == "speak"
        v1 = self.service.runtime.config.v1
        try:
            stream = await self.service.open_stream(
                req.speech(v1.text_format, v1.text_start),
                door="protocol-v1",
                label={"connection": self.number, "id": req.id},
                speak_key=self.client_key if speak else None,
            )
        except ServiceError as exc:
            self._write(ErrorEvent.from_exc(req.id, exc).to_dict())
            return
        except Exception as exc:  # the core counts what it raises; a bug it did not catch
            self._internal(req.id, exc, req.op)
            return
        state.stream = stream
        if state.cancel_reason is not None:
            stream.cancel(state.cancel_reason)
        if state.early_text is not None:
            if state.early_text.error is not None:
                stream.fail(state.early_text.error)  # its one error comes from run()
            for held in state.early_text.held(req.id):
                self._to_stream(stream, held)
        state.early_text = None
        try:
            if speak:
                result = await self._speak(req, stream)
            else:
                await self.send(
                    StartEvent(
                        req.id, req.out_rate(stream.sample_rate), req.format, stream.voice_name
                    ).to_dict()
                )
                result = await self._stream(req, stream)
        except ServiceError as exc:
            if state.cancel_reason != "disconnect":
                self._write(ErrorEvent.from_exc(req.id, exc).to_dict())
            return
        except ClientTooSlow:
            self._too_slow(req.id)
            return
        except (ConnectionError, OSError):
            return
        except Exception as exc:
            self._internal(req.id, exc, req.op)
            return
        finally:
            stream.close()  # no-op once it ran; releases it if sending 'start' failed
        if state.cancel_reason != "disconnect":
            self._write(
                EndEvent(
                    req.id,
                    result.cancelled,
                    result.stats,
                    result.interrupted,
                    result.heard,
                    result.sent_text_span,
                ).to_dict()
            )

    async def _stream(self, req: SynthesizeRequest, stream: Stream) -> Any:
        encoder = PcmEncoder(stream.sample_rate, req.out_rate(stream.sample_rate), req.format)
        if req.pace_ms is not None:
            return await self._paced(req, stream, encoder, req.pace_ms)

        async def emit(chunk: Chunk) -> None:
            event = ChunkEvent.from_chunk(req.id, chunk, encoder(chunk.samples, chunk.final))
            await self.send(event.to_dict(), grace_s=stream.buffer_s())

        return await stream.run(emit)

    async def _paced(
        self, req: SynthesizeRequest, stream: Stream, encoder: PcmEncoder, pace_ms: int
    ) -> Any:
        """``pace_ms``: chunks go into a :class:`Pacer`, frames leave on the clock, and
        ``end`` follows the last frame (:mod:`appliance.doors.pace`)."""

        async def send(frame: PacedFrame[Chunk]) -> None:
            event = ChunkEvent.from_frame(req.id, frame, req.word_timings)
            await self.send(event.to_dict(), grace_s=stream.buffer_s())

        pacer: Pacer[Chunk] = Pacer(
            pace_ms,
            encoder.out_rate,
            encoder.bytes_per_sample,
            encoder.silence,
            send,
            self.server.paced,
        )

        async def emit(chunk: Chunk) -> None:
            await pacer.put(encoder(chunk.samples, chunk.final), chunk, chunk.words)

        try:
            result = await stream.run(emit)
            if not result.cancelled:
                await pacer.close()
            result.stats.update(paced_frames=pacer.frames, paced_late=pacer.late)
            return result
        finally:
            await pacer.stop()

    async def _speak(self, req: SynthesizeRequest, stream: Stream) -> Any:
        async def queued(position: int) -> None:
            # Speech outlives its client: a client gone, or not reading, is no reason to
            # stop it (_client_gone decides what happens to it).
            with contextlib.suppress(ClientTooSlow, ConnectionError, OSError):
                await self.send(SimpleEvent(req.id, "queued", {"position": position}).to_dict())

        def started(latency_ms: float) -> None:
            self._write(
                SimpleEvent(req.id, "started", {"latency_ms": round(latency_ms, 2)}).to_dict()
            )

        def mark(name: str) -> None:
            self._write(SimpleEvent(req.id, "mark", {"name": name}).to_dict())

        def word(span: tuple[int, int]) -> None:
            self._write(SimpleEvent(req.id, "word", {"text_span": list(span)}).to_dict())

        return await stream.run_speech(queued, started, mark, word if req.word_timings else None)
