"""Parts of a running work item that another, idle worker may run at the same time.

A lone request's decode hands half of its frames to an idle worker
(:meth:`appliance.core.scheduler.Scheduler.beside`).  A part runs under the offering
item's stop token, so whatever stops the item stops its part too; the item that needs
the result and finds the part not taken yet runs it itself, so a part never waits for
a worker that may not come.

Thread: workers only.  ``offer_locked`` and ``take_locked`` run under the scheduler's
lock, ``join`` takes it; a part's ``run`` holds no lock.  Bounds: at most one part per
running item (the queue is as long as the workers are many).
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from appliance.model.engine.interrupt import StopToken, stoppable

T = TypeVar("T")


@dataclass
class Part(Generic[T]):
    """One part offered: what it runs, under which token, and how it ended."""

    fn: Callable[[], T]
    token: StopToken | None
    done: threading.Event = field(default_factory=threading.Event)
    taken: bool = False
    result: T | None = None
    error: BaseException | None = None

    def run(self) -> float:
        """Run it here (a worker that took it); returns the seconds it ran."""
        started = time.monotonic()
        try:
            with stoppable(self.token):
                self.result = self.fn()
        except Exception as exc:  # a boundary: the offering item raises it, from join
            self.error = exc
        finally:
            self.done.set()
        return time.monotonic() - started


class Parts:
    """The parts offered and not yet taken (see the module)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._queue: collections.deque[Part[Any]] = collections.deque()

    def offer_locked(self, fn: Callable[[], T], token: StopToken | None) -> Callable[[], T]:
        """Queue ``fn``; returns what gives its result (see :meth:`join`)."""
        part: Part[T] = Part(fn, token)
        self._queue.append(part)
        return functools.partial(self.join, part)

    def take_locked(self) -> Part[Any] | None:
        """The oldest part not taken yet, now taken, for the calling worker to run."""
        if not self._queue:
            return None
        part = self._queue.popleft()
        part.taken = True
        return part

    def join(self, part: Part[T]) -> T:
        """The part's result: run right here if no worker took it, else waited for."""
        with self._lock:
            mine = not part.taken
            if mine:
                self._queue.remove(part)
                part.taken = True
        if mine:
            return part.fn()
        part.done.wait()
        if part.error is not None:
            raise part.error
        return part.result  # type: ignore[return-value]
