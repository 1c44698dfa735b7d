"""How long the daemon's threads wait for a CPU: what a CPU hog beside it does.

The kernel keeps, for each thread, the time it ran and the time it waited on a run queue
while runnable (``/proc/<pid>/task/<tid>/schedstat``: run ns, wait ns, time slices; any
kernel with ``CONFIG_SCHED_INFO``).  Of the time the daemon's threads were runnable, the
share spent waiting was 0.12–0.37 on a quiet 2-core box (its own threads outnumber the
cores at moments) and 0.52–0.54 beside two CPU hogs, which stalled streams that
admission had let in (docs/scheduling.md, "Where 32 streams stand").  ``stats`` reports
it as ``scheduler.cpu_wait`` and ``/metrics`` as ``ttsd_cpu_wait_ratio``; admission shrinks
its load limit by it (appliance.core.admission).

An idle daemon's threads are not runnable, so there is nothing of theirs to measure, and
hogs that started meanwhile were seen only a second into the next burst, after its first
wave was let in.  So an interval in which the threads were runnable less than
``min_runnable_s`` gives the wait a burst would meet instead (:func:`expected_wait`): the
cores the other processes kept busy (the busy time of the CPUs this process may run on,
``/proc/stat``'s ``cpuN`` lines for its affinity, less its own run time) beside the
``threads`` the daemon would run, on those CPUs.  Two hogs on 2 cores beside 2 workers:
0.5, where a burst measured 0.46–0.57.  Under a CPU quota (cgroup bandwidth,
``quota``) each thread gets at most ``quota / threads`` of a CPU.

Threads: :meth:`RunQueueWait.sample` runs on the inference workers, after each item and
when an idle worker's wait times out (procfs reads: file I/O stays off the event loop); it
reads at most once per ``min_interval_s`` and skips when another worker is reading.  The
loop reads :attr:`RunQueueWait.share`, a float written whole.  Bounds: one pair of
integers per live thread and one reading of ``/proc/stat``, replaced at each read.  A
thread counts from its second read (a new one's totals are not this interval's), and a
thread that ended drops out.  Without schedstat (another OS, or a kernel without it),
``share`` stays None; without ``/proc/stat`` an idle daemon keeps the share it had.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import NamedTuple

Totals = dict[int, tuple[int, int]]
"""Run and run-queue wait nanoseconds, by thread id."""


class BoxTicks(NamedTuple):
    """The CPU time since boot of the box, or of the CPUs the daemon may run on
    (``/proc/stat``'s ``cpu`` line or its ``cpuN`` lines, in clock ticks)."""

    busy: int
    """Not idle: user, nice, system, irq, softirq, and steal (taken by other guests)."""
    total: int
    """Busy, idle and iowait."""
    cpus: int
    """The CPUs counted (``cpuN`` lines)."""


def _ticks(fields: list[bytes]) -> tuple[int, int]:
    """(busy, total) of one ``cpu`` line's fields."""
    ticks = [int(t) for t in fields[:8]]
    if len(ticks) < 4:
        raise ValueError("a cpu line with fewer than 4 fields")
    total = sum(ticks)  # guest time, fields 9 and 10, is within user and nice already
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return total - idle, total


def read_totals(tasks: Path) -> Totals | None:
    """Each thread's (run ns, wait ns) under ``tasks`` (``/proc/<pid>/task``); None when
    there is no schedstat to read."""
    out: Totals = {}
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    for name in names:
        try:
            # os.read, not pathlib: a fifth of the CPU, and an idle daemon reads every second.
            fd = os.open(os.path.join(tasks, name, "schedstat"), os.O_RDONLY)
            try:
                fields = os.read(fd, 256).split()
            finally:
                os.close(fd)
            out[int(name)] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile, or a field the kernel does not give
    return out or None


def read_box(stat: Path, allowed: Collection[int] | None = None) -> BoxTicks | None:
    """The CPU ticks from ``stat`` (``/proc/stat``) of the whole box, or of the ``allowed``
    CPUs only (a daemon confined to some of the box's CPUs shares only those); None when
    it cannot be read."""
    text = b""
    try:
        fd = os.open(stat, os.O_RDONLY)
        try:
            # The cpu lines come first: the rest (interrupts: long on a big box) is not
            # read.  os.read, not a text file: half the CPU, read every second when idle.
            while b"\nintr" not in text and (chunk := os.read(fd, 65536)):
                text += chunk
        finally:
            os.close(fd)
        box: tuple[int, int] | None = None
        busy = total = cpus = 0
        for line in text.split(b"\n"):
            name, _, rest = line.partition(b" ")
            if name == b"cpu":
                box = _ticks(rest.split())
            elif name.startswith(b"cpu") and name[3:].isdigit():
                if allowed is None or int(name[3:]) in allowed:
                    if allowed is not None:
                        b, t = _ticks(rest.split())
                        busy, total = busy + b, total + t
                    cpus += 1
            elif box is not None:
                break
    except (OSError, ValueError):
        return None
    if box is None or cpus == 0:
        return None
    return BoxTicks(*box, cpus) if allowed is None else BoxTicks(busy, total, cpus)


def _own_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on (a cpuset, ``taskset``, systemd's ``AllowedCPUs``);
    None where the OS does not say."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return frozenset(getaffinity(0)) if getaffinity is not None else None


def expected_wait(others: float, threads: int, cpus: int, quota: float | None = None) -> float:
    """The share of their runnable time that ``threads`` busy threads would wait beside
    ``others`` busy cores' worth of other work on ``cpus`` cores: sharing the cores
    evenly, each runnable thread gets ``cpus / (others + threads)`` of one while they
    outnumber the cores, and waits the rest.  Under a CPU ``quota`` (in CPUs: the
    process's cgroup, appliance.ops.cpuquota) each gets at most ``quota / threads``; the
    kernel's throttling counts as waiting in schedstat too (measured: 2 busy threads
    under a 0.5-CPU quota waited 0.75 of their runnable time)."""
    crowd = others + threads
    if crowd <= 0:
        return 0.0
    share = min(1.0, cpus / crowd, quota / threads if quota is not None else 1.0)
    return max(0.0, 1.0 - share)


class RunQueueWait:
    """The share of the process's runnable time spent waiting for a CPU, lately."""

    def __init__(
        self,
        tasks: Path | None = None,
        min_interval_s: float = 1.0,
        min_runnable_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        *,
        stat: Path | None = None,
        threads: int = 1,
        allowed: Collection[int] | None = None,
        quota: float | None = None,
    ) -> None:
        """``min_runnable_s``: a share is measured once the threads were runnable this long
        since the last one; an interval with less gives :func:`expected_wait` for
        ``threads`` (the workers) from ``stat``.  ``stat`` is ``/proc/stat`` when ``tasks``
        is this process's (the default); a fake task tree reads a box only if given one.
        ``allowed``: the CPUs counted (this process's own, where the OS says, when ``tasks``
        is this process's; else the whole box).  ``quota``: the process's CPU quota, if
        any (see :func:`expected_wait`)."""
        own = tasks is None
        self._tasks = tasks if tasks is not None else Path(f"/proc/{os.getpid()}/task")
        self._stat = stat if stat is not None or not own else Path("/proc/stat")
        self._allowed = frozenset(allowed) if allowed is not None else _own_cpus() if own else None
        self._threads = max(1, threads)
        self.quota = quota
        """In CPUs; set again when the cgroup's quota changes (``Scheduler.set_quota``)."""
        self._min_interval_s = min_interval_s
        self._min_runnable_ns = int(min_runnable_s * 1e9)
        self._clock = clock
        self._lock = threading.Lock()
        self._last: Totals = {}
        self._box: BoxTicks | None = None
        """The box's ticks at the last read, with ``_last``."""
        self._pending = (0, 0)
        """Run and wait ns summed since the last share was taken."""
        self._read_at = float("-inf")
        self.share: float | None = None

    def sample(self) -> None:
        """Read the threads' totals if the last read is old enough (any thread)."""
        now = self._clock()
        if now - self._read_at < self._min_interval_s or not self._lock.acquire(blocking=False):
            return
        try:
            interval_s, self._read_at = now - self._read_at, now
            totals = read_totals(self._tasks)
            if totals is None:
                return
            ran = waited = 0
            for tid, (r, w) in totals.items():
                if (before := self._last.get(tid)) is not None:
                    ran += max(0, r - before[0])
                    waited += max(0, w - before[1])
            self._last = totals
            box = self._box
            self._box = read_box(self._stat, self._allowed) if self._stat is not None else None
            run, wait = self._pending[0] + ran, self._pending[1] + waited
            if run + wait >= self._min_runnable_ns:
                self.share = wait / (run + wait)
                run = wait = 0
            elif (idle := self._idle_share(box, ran, interval_s)) is not None:
                self.share = idle
                run = wait = 0  # a share says what the last interval was, never an older one
            self._pending = (run, wait)
        finally:
            self._lock.release()

    def _idle_share(self, before: BoxTicks | None, own_ns: int, interval_s: float) -> float | None:
        """The wait a burst would meet, from the box's busy time over the interval that
        ended now less this process's own ``own_ns``; None without two box readings."""
        after = self._box
        if before is None or after is None or interval_s <= 0:
            return None
        total = after.total - before.total
        if total <= 0:
            return None
        busy_cores = after.cpus * max(0, after.busy - before.busy) / total
        others = max(0.0, busy_cores - own_ns / 1e9 / interval_s)
        return expected_wait(others, self._threads, after.cpus, self.quota)
