"""An in-memory connection for the door frame's tests: messages in, events out, no socket.

:class:`MemoryChannel` is a :class:`~appliance.doors.frame.session.Channel` whose
transport keeps what the session writes until the test reads it (:meth:`take`): while
the test reads nothing, the output stays over its bound, as a client that stopped
reading.  :class:`LineProtocol` is a door in a few lines: each message is a string, each
request's end is ``end KEY VALUE`` and its error ``error KEY CODE``; what a message does
is chosen by the test (``say``, ``fail``, ``bug``, ``hold``, ``flood``, ``boom``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from typing import Any

from appliance.doors.frame.ending import Report
from appliance.doors.frame.requests import Request
from appliance.doors.frame.session import Channel, Fatal, Session, WireProtocol
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import LimitsConfig

log = logging.getLogger("tests.doors.frame")


class MemoryTransport(asyncio.WriteTransport):
    """Holds what is written until the client takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.buf = bytearray()
        self.high = 0
        self.closed = False
        self.aborted = False
        self.eof = False
        self.on_lost: Callable[[], None] = lambda: None
        """The connection is gone (closed and flushed, or aborted): the reader sees EOF."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closed:
            self.buf += data

    def get_write_buffer_size(self) -> int:
        return len(self.buf)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high = high or 0

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        if not self.buf:
            self.on_lost()

    def abort(self) -> None:
        self.closed = self.aborted = True
        self.on_lost()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class MemoryChannel(Channel):
    """The session's side of an in-memory connection; the test is the client."""

    def __init__(self) -> None:
        self.transport = self.mem = MemoryTransport()
        self.refused: bytes | None = None

    def write(self, data: bytes) -> None:
        self.mem.write(data)

    async def drain(self) -> None:
        while len(self.mem.buf) > self.mem.high and not self.mem.closed:
            await asyncio.sleep(0.01)
        if self.mem.closed:
            raise ConnectionResetError("closed")

    def is_closing(self) -> bool:
        return self.mem.closed

    def close(self) -> None:
        self.mem.close()

    async def refuse(self, payload: bytes) -> None:
        self.refused = payload
        self.mem.write(payload)
        self.mem.write_eof()

    def take(self) -> list[str]:
        """What the client reads now, as lines."""
        data, self.mem.buf = bytes(self.mem.buf), bytearray()
        if self.mem.closed:
            self.mem.on_lost()  # closed once flushed
        return [line for line in data.decode().split("\n") if line]


class LineProtocol(WireProtocol[str]):
    """A door in a few lines (see the module doc)."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.inbox: asyncio.Queue[str | None] = asyncio.Queue()
        self.partial_now = False
        self.eof_disconnects = False
        self.release = asyncio.Event()
        self.bodies_started: list[Hashable] = []
        self.bodies_cancelled: list[Hashable] = []

    async def read(self) -> str | None:
        msg = await self.inbox.get()
        if msg == "garbage":
            raise Fatal(ServiceError(ErrorCode.BAD_REQUEST, "not a message"))
        return msg

    @property
    def partial(self) -> bool:
        return self.partial_now

    def error_bytes(self, key: Hashable, exc: ServiceError) -> bytes:
        return f"error {key} {exc.code}\n".encode()

    def eof_is_disconnect(self) -> bool:
        return self.eof_disconnects

    async def dispatch(self, msg: str) -> None:
        op, _, key = msg.partition(" ")
        if op == "boom":
            raise RuntimeError("a bug in dispatch")
        if op == "now":
            self.session.write(f"now {key}\n".encode())
            return
        req = Request(key, op)
        self.session.requests.start(req, self._body(req))

    async def _body(self, req: Request) -> bytes:
        if req.op == "say":
            return f"end {req.key} said\n".encode()
        if req.op == "fail":
            raise ServiceError(ErrorCode.BAD_REQUEST, "refused")
        if req.op == "bug":
            raise ZeroDivisionError("a bug on the request's path")
        if req.op == "hold":
            self.bodies_started.append(req.key)
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.bodies_cancelled.append(req.key)
                raise
            return f"end {req.key} held\n".encode()
        if req.op == "flood":
            while True:
                await self.session.send(b"x" * 1024 + b"\n")
        raise ServiceError(ErrorCode.BAD_REQUEST, f"unknown {req.op}")

    def client_gone(self) -> None:
        for r in self.session.requests:
            if r.task is not None:
                r.task.cancel()  # the bodies here have no stream to cancel
        super().client_gone()


class Counts:
    """The errors a session counted (the core's ``record_error`` in the daemon)."""

    def __init__(self) -> None:
        self.codes: list[str] = []

    def __call__(self, code: str) -> None:
        self.codes.append(code)


def make_session(
    limits: LimitsConfig | None = None,
) -> tuple[Session, MemoryChannel, LineProtocol, Counts]:
    """A session over a memory channel with :class:`LineProtocol` (call in a loop)."""
    lim = limits or LimitsConfig()
    channel = MemoryChannel()
    counts = Counts()
    report = Report(counts, log, "test")
    get: Callable[[], LimitsConfig] = lambda: lim  # noqa: E731
    session = Session(channel, get, report, 1, LineProtocol)
    protocol = session.protocol
    assert isinstance(protocol, LineProtocol)
    channel.mem.on_lost = lambda: protocol.inbox.put_nowait(None)
    return session, channel, protocol, counts
