"""Earliest-deadline-first queue of inference work, run by worker threads.

Work items are "encode clause" and "decode window".  Each carries a deadline
(monotonic seconds): a stream's next window is due when its client will have
played what it already has, minus a safety watermark; a new request's first
work is due now, so it jumps ahead of streams that are comfortably ahead.

A worker picks, in this order:

1. the real-time item with the earliest deadline, if that deadline has passed
   (the item is *due*: its client's buffer is down to the watermark);
2. otherwise a ``realtime=False`` item (files, batch): they run only when
   nothing real-time is due;
3. otherwise the earliest real-time item that is not due yet: decoding ahead
   only ever uses time nobody else is waiting for.

With more than one worker, work that is not due (2 and 3) never takes the
last free worker: one always stays for due work, so a new request never waits
behind somebody else's decode-ahead.  Unless all the work there is belongs to one
request (a file, a reader that takes audio as fast as it comes): then its next
clause's encode runs beside its decode on the last worker, and due work that
arrives while no worker is free stops as much of it as it needs workers (a batch item
first, then the one started last), where a newcomer stops all of it.  Such an item may
also hand part of itself to a free worker (:meth:`Scheduler.beside`: half of a decode
window, half of a flow); a part of work ahead runs under the item's stop token, so a
newcomer stops both, a due item's part yields (another request's work stops it and the
item runs it itself), and the item runs it itself if no worker took it yet when it needs
the result.  A free worker takes due work before a part.  Nor does a newcomer share the
CPU with such work: a request's first item is *urgent*, and while one is queued or
running, work that is not due is stopped (:mod:`appliance.model.engine.interrupt`) and
put back in the queue, and none starts, but the newcomer's own where each worker has a
CPU to itself (``own_cores``) and the newcomer is alone: its next clause's encode then
runs on the core its first item leaves idle, sharing none with it.  The stopped run's
partial work is lost; it was only ever using time nobody else was waiting for.  Due
work is never stopped for a newcomer, so a newcomer may still wait for due windows a
worker is running.

A queued newcomer also goes ahead of due work that can wait: work whose listener
still has audio in hand for a first item and then the due work itself, one after
another (``slack_until``, from the stream, is when the listener runs dry; the
rule and the run times it learns: :mod:`appliance.core.newcomers`).  The
watermark makes a stream's next window due long before its listener runs dry:
in a burst of eight requests at once, EDF alone served the first two streams'
second and third windows before the last newcomers' first sound (P95 ~360 ms).

An item wakes the idle worker that comes first (worker 0 before worker 1), so a lone
stream's items all run on one thread, whose CPU and caches stay warm; with
``engine.pin_threads`` each worker has a CPU of its own (``cpus``).

Inference never runs on the event loop: the loop submits and awaits an
``asyncio.Future`` that a worker resolves; cancelling an owner removes its
queued items, stops its running one and cancels their futures, so nothing
waits on work that will never run and no core works for a request that is gone.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from appliance.core.newcomers import NewcomerRule
from appliance.core.parts import Part, Parts
from appliance.model.engine.interrupt import Interrupted, StopToken, stoppable
from appliance.ops.cpuwait import RunQueueWait

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(order=True)
class _Item(Generic[T]):
    deadline: float
    seq: int
    fn: Callable[[], T] = field(compare=False)
    future: asyncio.Future[T] = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    owner: object = field(compare=False)
    kind: str = field(compare=False)
    submitted: float = field(compare=False)
    realtime: bool = field(default=True, compare=False)
    urgent: bool = field(default=False, compare=False)
    slack_until: float | None = field(default=None, compare=False)
    """When its listener runs dry (the latest finish that serves it in time); None: no
    audio in hand (:mod:`appliance.core.newcomers`)."""
    cancelled: bool = field(default=False, compare=False)
    # Set while a worker runs the item:
    optional: bool = field(default=False, compare=False)
    token: StopToken | None = field(default=None, compare=False)
    started: float = field(default=0.0, compare=False)


class _Idle:
    """What :meth:`Scheduler._next` returns when an idle worker's wait ran out."""


_IDLE = _Idle()


@dataclass
class WorkTiming:
    """How long an item waited and ran; handed back with its result."""

    queue_s: float
    run_s: float
    finished: float
    late: bool


class Scheduler:
    """EDF queue (real-time heap + batch heap) + N worker threads."""

    def __init__(
        self,
        workers: int,
        name: str = "infer",
        cpus: Sequence[int] | None = None,
        quota: float | None = None,
        own_cores: bool = False,
    ) -> None:
        """``cpus``: worker k runs on ``cpus[k]`` (``appliance.model.engine.threads.pinning``).
        ``quota``: the process's CPU quota in CPUs (``appliance.ops.cpuquota``), if any.
        ``own_cores``: each worker's runs keep to one CPU that no other worker's use (the
        CPU plan's :attr:`~appliance.model.engine.threads.CpuPlan.own_cores`)."""
        self._n = max(1, workers)
        self.own_cores = own_cores
        """Whether a lone request's work ahead may run beside its own urgent item: with
        sessions of one thread, one on each core, it takes nothing from that item (a whole
        8 s request read as fast as it comes ended 5 % sooner, its first packet the same)."""
        self.quota = quota
        self._name = name
        self._rt: list[_Item[Any]] = []
        self._batch: list[_Item[Any]] = []
        self._lock = threading.Lock()
        self._idle: dict[int, threading.Condition] = {}
        """Idle workers' wake-ups, by worker number (see _wake_one_locked)."""
        self._cpus = tuple(cpus) if cpus is not None and len(cpus) >= self._n else None
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._by_owner: dict[int, set[int]] = {}
        self._live: dict[int, _Item[Any]] = {}
        self._running: dict[int, _Item[Any]] = {}
        """Items the workers run now, by sequence number."""
        self._parts = Parts(self._lock)
        """Parts of running items that an idle worker may take (see beside)."""
        self._current = threading.local()
        """The item this worker thread runs (``item``), for :meth:`crowded`."""
        self.completed = 0
        self.late = 0
        self.cancelled = 0
        self.ahead_runs = 0
        """Items run before they were due (decode ahead on otherwise idle workers)."""
        self.stopped_ahead = 0
        """Items run ahead of time that were stopped for a newcomer and queued again."""
        self.busy_s = 0.0
        """Worker-seconds spent running items (for utilisation)."""
        self._optional_limit = max(1, self._n - 1)
        self.cpu_wait = RunQueueWait(threads=self._n, quota=quota)
        """How long the process's threads wait for a CPU (read by the workers, busy or idle:
        an idle worker reads it each time its wait runs out)."""
        self.idle_s = 1.0
        """How long an idle worker waits before it looks again (and reads the wait)."""
        # (finished, seconds past deadline) of recent real-time items, for admission.
        self._lateness: collections.deque[tuple[float, float]] = collections.deque(maxlen=4096)
        self.heartbeat = time.monotonic()
        """Last time a worker was seen alive (idle wait or finished item)."""
        self.busy_since: float | None = None
        self.newcomers = NewcomerRule()
        """When a first item goes ahead of due work, and the run times it learns."""

    def start(self) -> None:
        for k in range(self._n):
            t = threading.Thread(
                target=self._work, args=(k,), name=f"{self._name}-{k}", daemon=True
            )
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._wake_all_locked()
        for t in self._threads:
            t.join(timeout=5)

    @property
    def workers(self) -> int:
        return self._n

    def depth(self) -> int:
        """Items queued or running: 0 once every stream has finished or been cancelled."""
        with self._lock:
            return len(self._live)

    def realtime_busy(self) -> bool:
        """Whether a real-time item is queued or running: a pause now would be heard."""
        with self._lock:
            return bool(self._rt) or any(i.realtime for i in self._running.values())

    def overdue_s(self) -> float:
        """How long the most urgent queued real-time item is past its deadline (0 if none)."""
        with self._lock:
            if not self._rt:
                return 0.0
            return max(0.0, time.monotonic() - self._rt[0].deadline)

    def mean_lateness_s(self, window_s: float) -> float:
        """Mean of how far real-time items finished past their deadlines (early counts as 0)
        over the last ``window_s`` seconds; 0 when none finished."""
        since = time.monotonic() - window_s
        with self._lock:
            recent = [late for t, late in self._lateness if t >= since]
        return sum(recent) / len(recent) if recent else 0.0

    @property
    def capacity(self) -> float:
        """The workers' worth of CPU the streams may claim (admission's projection): the
        workers, or fewer under a CPU quota (two workers cannot run at once on one CPU's
        worth; they take turns, and the projection must count one)."""
        return min(float(self._n), self.quota) if self.quota is not None else float(self._n)

    def set_quota(self, quota: float | None) -> None:
        """A CPU quota changed while serving (appliance.quotawatch): :attr:`capacity` and
        the idle wait estimate follow it; the workers stay as many."""
        self.quota = quota
        self.cpu_wait.quota = quota

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "queue_depth": len(self._live),
                "queued_realtime": len(self._rt),
                "queued_batch": len(self._batch),
                "running": len(self._running),
                "workers": self._n,
                "cpu_quota": self.quota,
                "completed": self.completed,
                "late_windows": self.late,
                "ahead_runs": self.ahead_runs,
                "stopped_ahead": self.stopped_ahead,
                "newcomers_ahead": self.newcomers.ahead,
                "cancelled_items": self.cancelled,
                "busy_s": round(self.busy_s, 3),
                "cpu_wait": None if (w := self.cpu_wait.share) is None else round(w, 3),
            }

    def heartbeat_age(self) -> float:
        """Seconds since a worker last proved it is alive; 0 while idle-waiting."""
        with self._lock:
            if not self._running:
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
        urgent: bool = False,
        slack_until: float | None = None,
    ) -> asyncio.Future[tuple[T, WorkTiming]]:
        """Queue ``fn``; ``urgent`` marks a real-time request's first item, ``slack_until``
        is the latest start that still serves a due item's listener in time (see above)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[T, WorkTiming]] = loop.create_future()
        item: _Item[Any] = _Item(
            deadline=deadline,
            seq=next(self._seq),
            fn=fn,
            future=fut,
            loop=loop,
            owner=owner,
            kind=kind,
            submitted=time.monotonic(),
            realtime=realtime,
            urgent=urgent and realtime,
            slack_until=slack_until,
        )
        with self._lock:
            if self._stopping:
                raise RuntimeError("scheduler stopped")
            heapq.heappush(self._rt if realtime else self._batch, item)
            self._live[item.seq] = item
            self._by_owner.setdefault(id(owner), set()).add(item.seq)
            if len(self._by_owner) > 1:
                self._parts.stop_yielding_locked()
            if item.urgent:
                self._stop_optional_locked()
            elif item.realtime and item.deadline <= item.submitted:
                self._free_for_due_locked(item.submitted)
            self._wake_one_locked()
        return fut

    def lone(self, owner: object) -> bool:
        """Whether ``owner``'s items are all the work queued or running (or none is)."""
        with self._lock:
            return self._by_owner.keys() <= {id(owner)}

    def beside(self, fn: Callable[[], T], *, wait: bool = False) -> Callable[[], T]:
        """On a worker: offer ``fn``, part of the item it runs, to a free worker while that
        item's request has all the work there is (:mod:`appliance.core.parts`); returns
        what gives ``fn``'s result (``fn`` itself when nobody may take it).  A part of work
        ahead runs under the item's token (a newcomer stops both); a due item's part
        yields to any other request's work (its worker is free for the newcomer at once,
        and the item runs the part itself).  A worker counts as free once its item is
        done, before it is back waiting: offered only to an idle one, a part was refused
        in the ~1 ms the other took to come back, and its item ran both halves.  ``wait``:
        offered even while every worker is busy, for the first to come free (a part long
        enough to outlast the items there; else the split would be paid for nothing)."""
        mine: _Item[Any] | None = getattr(self._current, "item", None)
        with self._lock:
            free = len(self._running) < self._n
            if mine is None or not (free or wait) or self._n < 2 or len(self._by_owner) != 1:
                return fn
            if mine.optional:
                join = self._parts.offer_locked(fn, mine.token)
            else:
                join = self._parts.offer_yielding_locked(fn)
            self._wake_one_locked()
        return join

    def _wake_one_locked(self) -> None:
        """Wake the idle worker that comes first: a lone stream's items then all run on
        worker 0, whose thread, CPU (``cpus``) and caches are the warm ones.  A plain
        condition wakes the worker idle longest, so the items went round the workers."""
        if self._idle:
            self._idle.pop(min(self._idle)).notify()

    def _wake_all_locked(self) -> None:
        for wake in self._idle.values():
            wake.notify()
        self._idle.clear()

    def _stop_optional_locked(self) -> None:
        for running in self._running.values():
            if running.optional and running.token is not None:
                running.token.stop()

    def _free_for_due_locked(self, now: float) -> None:
        """Stop as much work ahead as the due work queued needs workers: a batch item
        first, then the one started last (the least work lost).  Stopping all of it, as
        for a newcomer, threw away a lone reply's two clauses encoded ahead for one due
        window of its own, and both ran again (a 19 s reply read at 1x: 0-4 of its priors
        re-run, 0-1 now; docs/speed.md, stop 69)."""
        running = self._running.values()
        stopping = sum(i.token is not None and i.token.stopped for i in running)
        free = self._n - len(self._running)
        need = sum(i.deadline <= now for i in self._rt) - free - stopping
        if need <= 0:
            return
        ahead = [i for i in running if i.optional and i.token is not None and not i.token.stopped]
        ahead.sort(key=lambda i: (i.realtime, -i.started))
        for running_item in ahead[:need]:
            assert running_item.token is not None
            running_item.token.stop()

    def cancel_owner(self, owner: object) -> int:
        """Drop every queued item of ``owner`` at once and cancel its futures.

        Returns how many were dropped.  An item already running finishes; its
        result is discarded by the cancelled future.
        """
        dropped: list[_Item[Any]] = []
        with self._lock:
            seqs = self._by_owner.pop(id(owner), set())
            for s in seqs:
                item = self._live.pop(s, None)
                if item is not None:
                    item.cancelled = True
                    dropped.append(item)
                    if item.token is not None:  # running: stop it, its result is unwanted
                        item.token.stop()
                        self._parts.stop_yielding_locked()
            if dropped:
                # Rebuild rather than leave tombstones: the queue depth must be true.
                self._rt = [i for i in self._rt if not i.cancelled]
                self._batch = [i for i in self._batch if not i.cancelled]
                heapq.heapify(self._rt)
                heapq.heapify(self._batch)
                self.cancelled += len(dropped)
        for item in dropped:
            # A task awaiting this future (a prefetched encode) must not wait forever.
            try:
                item.loop.call_soon_threadsafe(_cancel, item.future)
            except RuntimeError:
                log.debug("event loop closed before %s was cancelled", item.kind)
        return len(dropped)

    def _forget(self, item: _Item[Any]) -> None:
        self._live.pop(item.seq, None)
        owned = self._by_owner.get(id(item.owner))
        if owned is not None:
            owned.discard(item.seq)
            if not owned:
                del self._by_owner[id(item.owner)]

    def crowded(self) -> bool:
        """Another worker runs due work or due work waits: the item that asks (on a
        worker) should keep to one core and do no more than it must."""
        mine = getattr(self._current, "item", None)
        with self._lock:
            now = time.monotonic()
            others = sum(not i.optional and i is not mine for i in self._running.values())
            return others > 0 or bool(self._rt and self._rt[0].deadline <= now)

    def _pick(self, now: float) -> tuple[_Item[Any] | None, bool]:
        """Due real-time work, else batch work, else real-time work ahead of time.

        Returns (item, optional); (None, False) when the only work left is not due and
        the workers it may use are busy.
        """
        if self._rt and self._rt[0].deadline <= now:
            first = None if self._rt[0].urgent else self.newcomers.pick(self._rt, now)
            if first is not None:
                self._rt.remove(first)
                heapq.heapify(self._rt)
                self.newcomers.ahead += 1
                return first, False
            return heapq.heappop(self._rt), False
        running = self._running.values()
        ahead = sum(i.optional for i in running)
        lone = len(self._by_owner) == 1  # one request's work: every core is its
        if ahead >= self._optional_limit and not lone:
            return None, False
        if any(i.urgent for i in running) and not (lone and self.own_cores):
            return None, False
        if self._batch:
            return heapq.heappop(self._batch), True
        if self._rt:
            self.ahead_runs += 1
            return heapq.heappop(self._rt), True
        return None, False

    def _wait_s(self, now: float) -> float:
        # Wake up when the earliest not-yet-due real-time item becomes due.
        if self._rt:
            return min(self.idle_s, max(0.001, self._rt[0].deadline - now))
        return self.idle_s

    def _work(self, k: int) -> None:
        """Worker ``k``: take the next item, run it, deliver it, until stopped."""
        self._pin(k)
        wake = threading.Condition(self._lock)
        while (item := self._next(k, wake)) is not None:
            self._take(item)
            # The wait for the next holds nothing of this one: its owner (a request's job,
            # with its output and timeline) and its result go with the request.
            item = None

    def _take(self, item: _Item[Any] | Part[Any] | _Idle) -> None:
        """(Worker thread.) Run ``item`` and deliver its result to its loop."""
        if isinstance(item, _Idle):
            # Nothing ran for a while: the wait still follows other processes' CPU.
            self.cpu_wait.sample()
            return
        if isinstance(item, Part):
            ran_s = item.run()
            with self._lock:
                self.busy_s += ran_s
            self.cpu_wait.sample()
            return
        started = time.monotonic()
        result, error, stopped = self._run_one(item)
        finished = time.monotonic()
        if self._settle(item, stopped, started, finished):
            timing = WorkTiming(
                started - item.submitted,
                finished - started,
                finished,
                item.realtime and finished > item.deadline,
            )
            try:
                item.loop.call_soon_threadsafe(_resolve, item.future, result, error, timing)
            except RuntimeError:
                log.debug("event loop closed before %s result was delivered", item.kind)
        # After the result went out, never before an item (a read costs ~0.5 ms): at
        # most once a second, by whichever worker comes first.
        self.cpu_wait.sample()

    def _pin(self, k: int) -> None:
        if self._cpus is not None:
            # Pin before the first run: ONNX Runtime's pool threads are on the other CPUs.
            try:
                os.sched_setaffinity(0, {self._cpus[k]})
            except OSError as exc:  # a CPU taken away since start: run unpinned
                log.warning("worker %d stays unpinned: %s", k, exc)

    def _next(self, k: int, wake: threading.Condition) -> _Item[Any] | Part[Any] | _Idle | None:
        """The next item worker ``k`` runs (waiting for one), marked running, or a part of
        a running one; ``_IDLE`` when its wait ran out with nothing queued (to read the
        wait outside the lock); None once the scheduler is stopping and nothing is left."""
        with self._lock:
            while True:
                now = time.monotonic()
                due = bool(self._rt) and self._rt[0].deadline <= now
                if not due and (part := self._parts.take_locked()) is not None:
                    return part
                if self._stopping and not self._rt and not self._batch:
                    return None
                item, optional = self._pick(now)
                if item is None:
                    if not self._running:
                        # Only an idle pool vouches for itself; a stuck worker must show.
                        self.heartbeat = now
                    self._idle[k] = wake
                    woken = wake.wait(timeout=self._wait_s(now))
                    self._idle.pop(k, None)  # timed out: nobody woke it
                    if not woken and not self._rt and not self._batch:
                        return _IDLE
                    continue
                if item.cancelled:
                    continue
                item.optional, item.token, item.started = optional, StopToken(), now
                self._running[item.seq] = item
                self.heartbeat = time.monotonic()
                if self._rt or self._batch:  # more work: another worker may take some
                    self._wake_one_locked()
                return item

    def _run_one(self, item: _Item[Any]) -> tuple[Any, BaseException | None, bool]:
        """``(result, error, stopped)``: stopped means interrupted for a newcomer."""
        assert item.token is not None
        self._current.item = item
        try:
            with stoppable(item.token):
                return item.fn(), None, False
        except Interrupted:
            return None, None, True
        except Exception as exc:  # delivered to the awaiting stream, never lost
            return None, exc, False
        finally:
            self._current.item = None

    def _settle(self, item: _Item[Any], stopped: bool, started: float, finished: float) -> bool:
        """Book the run; False when the item went back in the queue (stopped for a
        newcomer) or is gone, so there is nothing to deliver."""
        with self._lock:
            del self._running[item.seq]
            item.token = None
            self.busy_s += finished - started
            if stopped:
                if item.cancelled:
                    self._forget(item)
                else:  # stopped for a newcomer: back in the queue, where it was
                    self.stopped_ahead += 1
                    heapq.heappush(self._rt if item.realtime else self._batch, item)
                return False
            self.completed += 1
            self.late += item.realtime and finished > item.deadline
            self.newcomers.observe(
                item.urgent, item.realtime and not item.optional, finished - started
            )
            if item.realtime:
                self._lateness.append((finished, max(0.0, finished - item.deadline)))
            self.heartbeat = finished
            self._forget(item)
            return True


def _cancel(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.cancel()


def _resolve(
    fut: asyncio.Future[Any], result: Any, error: BaseException | None, timing: WorkTiming
) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result((result, timing))
