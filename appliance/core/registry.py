"""The live streams of one service, whatever door they came through, and the doors'
connection counts: the one registry admission, ``stats``, ``health`` and the shutdown
read.

Bounds: a stream is in it from its admission to its end, and the service checks
``limits.max_streams`` against it before it adds one; a door is counted once, by a
callable read at each report (nothing is copied).  Lifecycle: one per service, touched on
the event loop only; :meth:`StreamRegistry.wait_idle` is what a shutdown waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

S = TypeVar("S")


@dataclass(frozen=True)
class DoorCount:
    """A door's open connections, as it counts them (``stats``' ``connections``)."""

    name: str
    connections: Callable[[], int]


class StreamRegistry(Generic[S]):
    """Every live stream, numbered as it comes (see the module)."""

    def __init__(self) -> None:
        self.streams: set[S] = set()
        self.doors: list[DoorCount] = []
        self.on_request_done: list[Callable[[S], None]] = []
        """Called with each stream as it ends (the daemon's status line, heap trim, voices kept
        warm)."""
        self._numbers = itertools.count(1)
        self._idle = asyncio.Event()
        self._idle.set()

    def number(self) -> int:
        """The next stream's number (``stats`` and the request log name it by it)."""
        return next(self._numbers)

    def add(self, stream: S) -> None:
        self.streams.add(stream)
        self._idle.clear()

    def remove(self, stream: S) -> None:
        self.streams.discard(stream)
        if not self.streams:
            self._idle.set()
        for cb in self.on_request_done:
            cb(stream)

    async def wait_idle(self, timeout_s: float) -> bool:
        """True once no stream is live, False when ``timeout_s`` passed first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        return not self.streams

    def add_door(self, name: str, connections: Callable[[], int]) -> None:
        self.doors.append(DoorCount(name, connections))

    def connections(self) -> dict[str, int]:
        """Open connections by door."""
        return {d.name: d.connections() for d in self.doors}
