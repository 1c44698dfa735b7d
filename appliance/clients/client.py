"""Client library for protocol v1: sync :class:`Client` and asyncio :class:`AsyncClient`.

Both iterate a request's events and raise :class:`TtsdError` (with the
protocol's ``code``) for an ``error`` event.  One connection can carry many
requests; the sync client runs them one after another, the async client
concurrently.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import itertools
import os
import socket
import wave
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt

ENV_SOCKET = "TTSD_SOCKET"
BYTES_PER_SAMPLE = {"s16le": 2, "f32le": 4, "mulaw": 1, "alaw": 1}
MAX_EVENT_BYTES = 1 << 28


def encode(message: dict[str, Any]) -> bytes:
    """One client message on the wire (msgpack; audio stays ``bin``)."""
    out: bytes = msgpack.packb(message, use_bin_type=True)
    return out


def decoder() -> msgpack.Unpacker:
    """A streaming decoder for the daemon's events: ``feed`` bytes, iterate maps."""
    return msgpack.Unpacker(raw=False, max_buffer_size=MAX_EVENT_BYTES)


def is_refused(event: dict[str, Any]) -> bool:
    """An error about a message the daemon refused (a duplicate id, an append to a text
    stream that is closed …).  It never ends a request: the request with that id, if
    any, goes on."""
    return event.get("event") == "error" and event.get("refused") is True


class TtsdError(Exception):
    """An ``error`` event, or a connection that broke."""

    def __init__(self, code: str, message: str, event: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.event = event or {}


class BusyError(TtsdError):
    @property
    def retry_after_ms(self) -> int | None:
        value = self.event.get("retry_after_ms")
        return int(value) if isinstance(value, int) else None


def _error(event: dict[str, Any]) -> TtsdError:
    code = str(event.get("code", "internal"))
    cls = BusyError if code == "busy" else TtsdError
    return cls(code, str(event.get("message", "")), event)


START_HINT = (
    "is the daemon running? Start it with `ttsd serve` (or `systemctl start ttsd` where it"
    " is installed as a service), or name its socket with --socket or $TTSD_SOCKET"
)
"""Said after "cannot connect" when no daemon listens there (no file, or a stale one)."""


def connect_error(path: str, exc: OSError) -> TtsdError:
    """``cannot connect to PATH: why``, and how to start a daemon when none listens there."""
    why = exc.strerror or str(exc)
    hint = f"; {START_HINT}" if exc.errno in (errno.ENOENT, errno.ECONNREFUSED) else ""
    return TtsdError("connect", f"cannot connect to {path}: {why}{hint}")


def resolve_socket(path: str | os.PathLike[str] | None = None) -> str:
    if path:
        return str(path)
    env = os.environ.get(ENV_SOCKET)
    if env:
        return env
    from appliance.ops.paths import UnsafeSocketDirError, check_socket_path, default_socket_path

    candidate = default_socket_path()
    try:
        # /tmp/ttsd-UID may have been made by someone else, who would get our text.
        check_socket_path(candidate)
    except UnsafeSocketDirError as exc:
        raise TtsdError("connect", str(exc)) from exc
    system = Path("/run/ttsd/ttsd.sock")
    if not candidate.exists() and system.exists():
        return str(system)
    return str(candidate)


@dataclass
class Synthesis:
    """A whole synthesized request."""

    sample_rate: int
    format: str
    voice: str
    audio: bytes
    chunks: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    cancelled: bool = False

    @property
    def duration_ms(self) -> float:
        """How long the audio is (what was received, whatever ``end.stats`` says)."""
        frames = len(self.audio) // BYTES_PER_SAMPLE.get(self.format, 2)
        return 1000.0 * frames / self.sample_rate

    def samples(self) -> npt.NDArray[np.float32]:
        if self.format == "f32le":
            return np.frombuffer(self.audio, dtype="<f4").astype(np.float32)
        return np.frombuffer(self.audio, dtype="<i2").astype(np.float32) / np.float32(32767.0)

    def write_wav(self, path: str | os.PathLike[str]) -> None:
        pcm = self.audio
        if self.format == "f32le":
            pcm = (np.clip(self.samples(), -1, 1) * 32767).astype("<i2").tobytes()
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(self.sample_rate)
            w.writeframes(pcm)


def collect(events: Iterator[dict[str, Any]]) -> Synthesis:
    result: Synthesis | None = None
    parts: list[bytes] = []
    for ev in events:
        kind = ev.get("event")
        if kind == "start":
            result = Synthesis(int(ev["sample_rate"]), str(ev["format"]), str(ev["voice"]), b"")
        elif kind == "chunk" and result is not None:
            parts.append(bytes(ev["audio"]))
            result.chunks.append({k: v for k, v in ev.items() if k != "audio"})
        elif kind == "end" and result is not None:
            result.stats = dict(ev.get("stats") or {})
            result.cancelled = bool(ev.get("cancelled"))
    if result is None:
        raise TtsdError("internal", "stream ended without start")
    result.audio = b"".join(parts)
    return result


_TERMINAL = frozenset({"end", "error"})
_SINGLE = {
    "info": "info",
    "stats": "stats",
    "health": "health",
    "ping": "pong",
    "warmup": "ok",
    "stop": "ok",
}


class Client:
    """Blocking client; one request at a time.  ``sock``: a socket already connected to a
    daemon (one end of a socketpair: :mod:`appliance.clients.local`) instead of a path."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
        *,
        sock: socket.socket | None = None,
    ):
        self.path = "(connected socket)" if sock is not None else resolve_socket(socket_path)
        self._sock = sock or socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        if sock is None:
            try:
                self._sock.connect(self.path)
            except OSError as exc:
                self._sock.close()
                raise connect_error(self.path, exc) from exc
        self._unpacker = decoder()
        self._ids = itertools.count(1)
        self.refused: collections.deque[dict[str, Any]] = collections.deque(maxlen=32)
        """The latest refused-message errors (see :func:`is_refused`)."""

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def send(self, message: dict[str, Any]) -> None:
        try:
            self._sock.sendall(encode(message))
        except OSError as exc:  # a broken pipe here is the daemon's, not stdout's
            raise TtsdError("disconnected", f"the daemon closed the connection: {exc}") from exc

    def next_id(self) -> int:
        return next(self._ids)

    def recv(self) -> dict[str, Any]:
        while True:
            for msg in self._unpacker:
                if not isinstance(msg, dict):
                    raise TtsdError("internal", f"server sent a non-map: {msg!r}")
                return msg
            try:
                data = self._sock.recv(1 << 16)
            except TimeoutError as exc:
                wait = self._sock.gettimeout()
                raise TtsdError("timeout", f"no answer from the daemon in {wait} s") from exc
            except OSError as exc:
                raise TtsdError("disconnected", f"the connection broke: {exc}") from exc
            if not data:
                raise TtsdError("disconnected", "the daemon closed the connection")
            self._unpacker.feed(data)

    def events(self, rid: int) -> Iterator[dict[str, Any]]:
        """Events of request ``rid`` until its end; raises on ``error``."""
        while True:
            ev = self.recv()
            if is_refused(ev):
                self.refused.append(ev)
                continue
            if ev.get("id") not in (rid, None):
                continue
            if ev.get("event") == "error":
                raise _error(ev)
            yield ev
            if ev.get("event") in _TERMINAL:
                return

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        rid = self.next_id()
        self.send({"op": op, "id": rid, **fields})
        for ev in self.events(rid):
            if ev.get("event") == _SINGLE.get(op, ev.get("event")):
                return ev
        raise TtsdError("internal", f"no reply to {op}")

    def synthesize(self, text: str, **opts: Any) -> Iterator[dict[str, Any]]:
        """Yield ``start``, each ``chunk`` and ``end`` of one request."""
        rid = self.next_id()
        self.send({"op": "synthesize", "id": rid, "text": text, **opts})
        yield from self.events(rid)

    def synthesize_all(self, text: str, **opts: Any) -> Synthesis:
        return collect(self.synthesize(text, **opts))

    def text_stream(self, text: str = "", op: str = "synthesize", **opts: Any) -> TextStream:
        """Open a request whose text comes later: ``append`` / ``flush`` / ``finish``, then
        iterate its events (``start``, ``chunk`` …, ``end``)."""
        rid = self.next_id()
        self.send({"op": op, "id": rid, "text": text, "text_stream": True, **opts})
        return TextStream(self, rid)

    def info(self) -> dict[str, Any]:
        return self.request("info")

    def stats(self) -> dict[str, Any]:
        return self.request("stats")

    def health(self) -> dict[str, Any]:
        return self.request("health")

    def ping(self) -> bool:
        return self.request("ping").get("event") == "pong"


class TextStream:
    """A text-stream request on a blocking :class:`Client`."""

    def __init__(self, client: Client, rid: int) -> None:
        self.client = client
        self.id = rid

    def append(self, text: str, flush: bool = False) -> None:
        msg: dict[str, Any] = {"op": "append", "target": self.id, "text": text}
        if flush:
            msg["flush"] = True
        self.client.send(msg)

    def flush(self) -> None:
        self.append("", flush=True)

    def finish(self) -> None:
        self.client.send({"op": "finish", "target": self.id})

    def cancel(self) -> None:
        self.client.send({"op": "cancel", "id": self.client.next_id(), "target": self.id})

    def events(self) -> Iterator[dict[str, Any]]:
        return self.client.events(self.id)

    def collect(self) -> Synthesis:
        return collect(self.events())


class AsyncTextStream:
    """A text-stream request on an :class:`AsyncClient`: ``async for ev in stream``."""

    def __init__(self, client: AsyncClient, rid: int, queue: asyncio.Queue[dict[str, Any]]):
        self.client = client
        self.id = rid
        self._queue = queue
        self._done = False

    async def append(self, text: str, flush: bool = False) -> None:
        msg: dict[str, Any] = {"op": "append", "target": self.id, "text": text}
        if flush:
            msg["flush"] = True
        await self.client.send(msg)

    async def flush(self) -> None:
        await self.append("", flush=True)

    async def finish(self) -> None:
        await self.client.send({"op": "finish", "target": self.id})

    async def cancel(self) -> None:
        await self.client.send({"op": "cancel", "id": next(self.client._ids), "target": self.id})

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        try:
            while not self._done:
                ev = await self._queue.get()
                if ev.get("event") == "error":
                    self._done = True
                    raise _error(ev)
                yield ev
                if ev.get("event") in _TERMINAL:
                    self._done = True
        finally:
            if self._done:
                self.client._queues.pop(self.id, None)

    async def collect(self) -> Synthesis:
        return collect(iter([ev async for ev in self]))


class AsyncClient:
    """asyncio client; many requests may run at once on one connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._queues: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self.refused: collections.deque[dict[str, Any]] = collections.deque(maxlen=32)
        """The latest refused-message errors (see :func:`is_refused`)."""
        self._reader_task = asyncio.create_task(self._read())

    @classmethod
    async def connect(
        cls, socket_path: str | os.PathLike[str] | None = None, *, sock: socket.socket | None = None
    ) -> AsyncClient:
        """``sock``: a socket already connected to a daemon instead of a path."""
        if sock is not None:
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
            return cls(reader, writer)
        path = resolve_socket(socket_path)
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=1 << 20)
        except OSError as exc:
            raise connect_error(path, exc) from exc
        return cls(reader, writer)

    async def close(self) -> None:
        self._reader_task.cancel()
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    @property
    def connected(self) -> bool:
        """False once the daemon has closed the connection: every request would fail."""
        return not self._reader_task.done()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _read(self) -> None:
        unpacker = decoder()
        try:
            while True:
                data = await self._reader.read(1 << 16)
                if not data:
                    break
                unpacker.feed(data)
                for msg in unpacker:
                    if not isinstance(msg, dict):
                        continue
                    if is_refused(msg):
                        self.refused.append(msg)
                        continue
                    rid = msg.get("id")
                    targets = [self._queues[rid]] if rid in self._queues else []
                    if rid is None:
                        targets = list(self._queues.values())
                    for q in targets:
                        q.put_nowait(msg)
        finally:
            gone = {"event": "error", "code": "disconnected", "message": "connection closed"}
            for q in self._queues.values():
                q.put_nowait(gone)

    async def send(self, message: dict[str, Any]) -> None:
        # A request on a connection the daemon has closed would wait for ever: no reader
        # is left to hand it the "gone" error.
        if self._reader_task.done():
            raise TtsdError("disconnected", "the daemon closed the connection")
        try:
            self._writer.write(encode(message))
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise TtsdError("disconnected", f"the daemon closed the connection: {exc}") from exc

    async def events(self, op: str, **fields: Any) -> AsyncIterator[dict[str, Any]]:
        rid = next(self._ids)
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._queues[rid] = q
        try:
            await self.send({"op": op, "id": rid, **fields})
            while True:
                ev = await q.get()
                if ev.get("event") == "error":
                    raise _error(ev)
                yield ev
                if ev.get("event") in _TERMINAL or (
                    op in _SINGLE and ev.get("event") == _SINGLE[op]
                ):
                    return
        finally:
            self._queues.pop(rid, None)

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        async for ev in self.events(op, **fields):
            return ev
        raise TtsdError("internal", f"no reply to {op}")

    def synthesize(self, text: str, **opts: Any) -> AsyncIterator[dict[str, Any]]:
        return self.events("synthesize", text=text, **opts)

    async def synthesize_all(self, text: str, **opts: Any) -> Synthesis:
        events = [ev async for ev in self.synthesize(text, **opts)]
        return collect(iter(events))

    async def text_stream(
        self, text: str = "", op: str = "synthesize", **opts: Any
    ) -> AsyncTextStream:
        """Open a request whose text comes later (see :class:`AsyncTextStream`)."""
        rid = next(self._ids)
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._queues[rid] = q
        await self.send({"op": op, "id": rid, "text": text, "text_stream": True, **opts})
        return AsyncTextStream(self, rid, q)

    async def cancel(self, rid: int) -> None:
        await self.send({"op": "cancel", "id": next(self._ids), "target": rid})
