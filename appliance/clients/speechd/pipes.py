"""speech-dispatcher's pipes: stdout written without ever blocking the loop, stdin read
as bounded lines.

Bounds: a command line over :data:`MAX_LINE_BYTES` is cut (its rest read and dropped);
stdout's pipe is shrunk to :data:`PIPE_BYTES` and nothing is queued in front of it, so
what a ``STOP`` cannot take back is at most one pipe of audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os

from appliance.clients.speechd import wire

log = logging.getLogger("sd_ttsd")

MAX_LINE_BYTES = 1 << 20
"""A longer command line is cut (and logged); its rest is read and dropped."""
PIPE_BYTES = 4096
"""stdout's pipe is shrunk to this (Linux ``F_SETPIPE_SZ``): the server plays what sits in
the pipe even after a STOP it has not yet passed on, so little sits there."""
F_SETPIPE_SZ = 1031


class Output:
    """stdout: replies, events and audio, written without ever blocking the loop."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    @classmethod
    async def open(cls, fd: int = 1) -> Output:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        pipe = os.fdopen(fd, "wb", buffering=0, closefd=False)
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(), pipe
        )
        # drain() then waits until everything written has gone into the pipe: audio is
        # never queued here, where a STOP could not take it back.
        transport.set_write_buffer_limits(high=0)
        return cls(asyncio.StreamWriter(transport, protocol, None, loop))

    def write(self, data: bytes) -> None:
        if not self._writer.transport.is_closing():
            self._writer.write(data)

    def line(self, text: str) -> None:
        self.write(wire.line(text))

    async def drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            pass  # the server went away; the reader sees EOF and ends the module

    def close(self) -> None:
        self._writer.close()


class LineReader:
    """stdin as lines without their newline; a line over ``limit`` is cut, never buffered."""

    def __init__(self, reader: asyncio.StreamReader, limit: int = MAX_LINE_BYTES) -> None:
        self._reader = reader
        self._limit = limit

    async def readline(self) -> bytes | None:
        """The next line, or ``None`` at end of input."""
        kept = bytearray()
        while True:
            try:
                data = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial and not kept:
                    return None
                data = exc.partial + b"\n"
            except asyncio.LimitOverrunError as exc:
                piece = await self._reader.readexactly(exc.consumed)
                room = self._limit - len(kept)
                if room > 0:
                    kept += piece[:room]
                continue
            room = self._limit - len(kept)
            if len(kept) + len(data) - 1 > self._limit:
                log.warning("a command line over %d bytes was cut", self._limit)
            kept += data[:-1][: max(room, 0)]
            return bytes(kept).rstrip(b"\r")
