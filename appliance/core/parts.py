"""Parts of a running work item that another, idle worker may run at the same time.

A lone request's decode hands half of its frames to an idle worker
(:meth:`appliance.core.scheduler.Scheduler.beside`).  A part of work ahead of time runs
under the offering item's stop token, so whatever stops the item stops its part too.  A
part of due work *yields*: it has a token of its own, stopped when another request
arrives (:meth:`Parts.stop_yielding_locked`), and the item then runs it itself, so the
newcomer finds the worker free at once and the due item still gets its result.  The
item that needs the result and finds the part not taken yet runs it itself, so a part
never waits for a worker that may not come.

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

from appliance.model.engine.interrupt import Interrupted, StopToken, stoppable

T = TypeVar("T")


@dataclass
class Part(Generic[T]):
    """One part offered: what it runs, under which token, and how it ended."""

    fn: Callable[[], T]
    token: StopToken | None
    yielding: bool = False
    """A due item's: stopped for another request, then run by the item itself."""
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
        self._yielding: set[StopToken] = set()
        """The tokens of the yielding parts not joined yet."""

    def offer_locked(self, fn: Callable[[], T], token: StopToken | None) -> Callable[[], T]:
        """Queue ``fn`` under ``token``; returns what gives its result (see :meth:`join`)."""
        part: Part[T] = Part(fn, token)
        self._queue.append(part)
        return functools.partial(self.join, part)

    def offer_yielding_locked(self, fn: Callable[[], T]) -> Callable[[], T]:
        """Queue ``fn`` as a yielding part (see the module)."""
        part: Part[T] = Part(fn, StopToken(), yielding=True)
        assert part.token is not None
        self._yielding.add(part.token)
        self._queue.append(part)
        return functools.partial(self.join, part)

    def stop_yielding_locked(self) -> None:
        """Stop every yielding part: another request's work came (or the item's ended)."""
        for token in self._yielding:
            token.stop()
        self._yielding.clear()

    def take_locked(self) -> Part[Any] | None:
        """The oldest part not taken yet, now taken, for the calling worker to run."""
        if not self._queue:
            return None
        part = self._queue.popleft()
        part.taken = True
        return part

    def join(self, part: Part[T]) -> T:
        """The part's result: run right here if no worker took it (or it yielded), else
        waited for."""
        with self._lock:
            mine = not part.taken
            if mine:
                self._queue.remove(part)
                part.taken = True
        if not mine:
            part.done.wait()
        if part.yielding and part.token is not None:
            with self._lock:
                self._yielding.discard(part.token)
        if mine or (part.yielding and isinstance(part.error, Interrupted)):
            return part.fn()
        if part.error is not None:
            raise part.error
        return part.result  # type: ignore[return-value]
