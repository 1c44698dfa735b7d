"""Earliest-deadline-first queue of inference work, run by worker threads.

Work items are "encode clause" and "decode window".  Each carries a deadline
(monotonic seconds): a stream's next window is due when its client will have
played what it already has, minus a safety watermark; a new request's first
work is due now, so it jumps ahead of streams that are comfortably ahead.
Items of ``realtime=False`` requests (files, batch) only run when no real-time
item is queued.  Inference never runs on the event loop: the loop submits and
awaits an ``asyncio.Future`` that a worker resolves.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(order=True)
class _Item(Generic[T]):
    klass: int  # 0 = real-time, 1 = batch
    deadline: float
    seq: int
    fn: Callable[[], T] = field(compare=False)
    future: asyncio.Future[T] = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    owner: object = field(compare=False)
    kind: str = field(compare=False)
    submitted: float = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


@dataclass
class WorkTiming:
    """How long an item waited and ran; handed back with its result."""

    queue_s: float
    run_s: float
    finished: float
    late: bool


class Scheduler:
    """EDF queue + N worker threads."""

    def __init__(self, workers: int, name: str = "infer") -> None:
        self._n = max(1, workers)
        self._name = name
        self._heap: list[_Item[Any]] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._by_owner: dict[int, set[int]] = {}
        self._live: dict[int, _Item[Any]] = {}
        self.running = 0
        self.completed = 0
        self.late = 0
        self.heartbeat = time.monotonic()
        """Last time a worker was seen alive (idle wait or finished item)."""
        self.busy_since: float | None = None

    def start(self) -> None:
        for k in range(self._n):
            t = threading.Thread(target=self._work, name=f"{self._name}-{k}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        for t in self._threads:
            t.join(timeout=5)

    @property
    def workers(self) -> int:
        return self._n

    def depth(self) -> int:
        with self._cv:
            return len(self._live)

    def heartbeat_age(self) -> float:
        """Seconds since a worker last proved it is alive; 0 while idle-waiting."""
        with self._cv:
            if self.running == 0:
                return 0.0
            return time.monotonic() - self.heartbeat

    def submit(
        self,
        fn: Callable[[], T],
        *,
        deadline: float,
        realtime: bool,
        owner: object,
        kind: str,
    ) -> asyncio.Future[tuple[T, WorkTiming]]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[T, WorkTiming]] = loop.create_future()
        item: _Item[Any] = _Item(
            klass=0 if realtime else 1,
            deadline=deadline,
            seq=next(self._seq),
            fn=fn,
            future=fut,
            loop=loop,
            owner=owner,
            kind=kind,
            submitted=time.monotonic(),
        )
        with self._cv:
            if self._stopping:
                raise RuntimeError("scheduler stopped")
            heapq.heappush(self._heap, item)
            self._live[item.seq] = item
            self._by_owner.setdefault(id(owner), set()).add(item.seq)
            self._cv.notify()
        return fut

    def cancel_owner(self, owner: object) -> int:
        """Drop every queued item of ``owner`` at once.  Returns how many."""
        with self._cv:
            seqs = self._by_owner.pop(id(owner), set())
            n = 0
            for s in seqs:
                item = self._live.pop(s, None)
                if item is not None:
                    item.cancelled = True
                    n += 1
            if n:
                # Rebuild rather than leave tombstones: the queue depth must be true.
                self._heap = [i for i in self._heap if not i.cancelled]
                heapq.heapify(self._heap)
        return n

    def _forget(self, item: _Item[Any]) -> None:
        self._live.pop(item.seq, None)
        owned = self._by_owner.get(id(item.owner))
        if owned is not None:
            owned.discard(item.seq)
            if not owned:
                del self._by_owner[id(item.owner)]

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._stopping:
                    self.heartbeat = time.monotonic()
                    self._cv.wait(timeout=1.0)
                if self._stopping and not self._heap:
                    return
                item = heapq.heappop(self._heap)
                if item.cancelled:
                    continue
                self.running += 1
                self.heartbeat = time.monotonic()
            started = time.monotonic()
            result: Any = None
            error: BaseException | None = None
            try:
                result = item.fn()
            except Exception as exc:  # delivered to the awaiting stream, never lost
                error = exc
            finished = time.monotonic()
            late = item.klass == 0 and finished > item.deadline
            timing = WorkTiming(started - item.submitted, finished - started, finished, late)
            with self._cv:
                self.running -= 1
                self.completed += 1
                self.heartbeat = finished
                self._forget(item)
            try:
                item.loop.call_soon_threadsafe(_resolve, item.future, result, error, timing)
            except RuntimeError:
                log.debug("event loop closed before %s result was delivered", item.kind)


def _resolve(
    fut: asyncio.Future[Any], result: Any, error: BaseException | None, timing: WorkTiming
) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result((result, timing))
