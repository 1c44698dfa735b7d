"""Helpers for the Wyoming tests: the daemon's Wyoming address, whole responses, raw bytes."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncClient, AsyncTcpClient, AsyncUnixClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.tts import SynthesizeStopped

from tests.conftest import Daemon

LONG_TEXT = (
    "The morning train was late again, so Anna walked along the river instead. "
    "The water was high after the rain, and the ducks had claimed the footpath. "
    "At the top of the hill there is a small stone chapel. "
    "Nobody knows who built it, but every spring someone paints the door blue."
)
SHORT_TEXT = "Turn on the kitchen lights, please."


def wyoming_uri(daemon: Daemon, timeout: float = 30.0) -> str:
    """The address the daemon's log says its Wyoming door listens on (port 0 → the real one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"wyoming: listening on (\S+)", daemon.log())
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise AssertionError("no 'wyoming: listening on' line:\n" + daemon.log())


def client_for(uri: str, read_timeout: float = 60.0) -> AsyncClient:
    if uri.startswith("unix://"):
        return AsyncUnixClient(uri[len("unix://") :], read_timeout=read_timeout)
    host, port = uri[len("tcp://") :].rsplit(":", 1)
    return AsyncTcpClient(host, int(port), read_timeout=read_timeout)


@dataclass
class Response:
    """Everything the server sent for one request, up to its last event."""

    events: list[Event] = field(default_factory=list)
    first_chunk_s: float | None = None

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    @property
    def error(self) -> Error | None:
        for e in self.events:
            if Error.is_type(e.type):
                return Error.from_event(e)
        return None

    def chunks(self) -> list[AudioChunk]:
        return [AudioChunk.from_event(e) for e in self.events if AudioChunk.is_type(e.type)]

    def audio(self) -> np.ndarray:
        return np.frombuffer(b"".join(c.audio for c in self.chunks()), dtype="<i2")

    def start(self) -> AudioStart:
        return AudioStart.from_event(next(e for e in self.events if AudioStart.is_type(e.type)))


async def read_response(client: AsyncClient, streaming: bool = False, t0: float = 0.0) -> Response:
    """Events until ``audio-stop`` (one-shot) / ``synthesize-stopped`` (stream) or an error."""
    r = Response()
    while True:
        ev = await client.read_event()
        if ev is None:
            raise ConnectionError(f"connection closed after {r.types}")
        r.events.append(ev)
        if AudioChunk.is_type(ev.type) and r.first_chunk_s is None:
            r.first_chunk_s = time.perf_counter() - t0
        if Error.is_type(ev.type):
            return r
        if SynthesizeStopped.is_type(ev.type) or (AudioStop.is_type(ev.type) and not streaming):
            return r


async def request(uri: str, *events: Event, streaming: bool = False) -> Response:
    """One connection, these events, the whole response."""
    async with client_for(uri) as c:
        t0 = time.perf_counter()
        for e in events:
            await c.write_event(e)
        return await read_response(c, streaming, t0)


async def raw_exchange(uri: str, data: bytes, timeout: float = 10.0) -> tuple[bytes, bool]:
    """Send raw bytes; everything the server sends back and whether it closed the connection."""
    if uri.startswith("unix://"):
        reader, writer = await asyncio.open_unix_connection(uri[len("unix://") :])
    else:
        host, port = uri[len("tcp://") :].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
    got = b""
    closed = False
    try:
        writer.write(data)
        with __import__("contextlib").suppress(ConnectionError):
            await writer.drain()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    piece = await reader.read(65536)
                    if not piece:
                        closed = True
                        break
                    got += piece
        except TimeoutError:
            pass
        except ConnectionError:
            closed = True
    finally:
        writer.close()
    return got, closed


def parse_events(data: bytes) -> list[dict[str, Any]]:
    """Headers (with their data merged) of the events in ``data``: enough for error replies."""
    import json

    out = []
    while data:
        line, _, data = data.partition(b"\n")
        header = json.loads(line)
        n = header.get("data_length") or 0
        if n:
            header.setdefault("data", {}).update(json.loads(data[:n]))
            data = data[n:]
        data = data[header.get("payload_length") or 0 :]
        out.append(header)
    return out
