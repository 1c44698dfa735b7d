"""How long the daemon's threads wait for a CPU: what a CPU hog beside it does.

The kernel keeps, for each thread, the time it ran and the time it waited on a run queue
while runnable (``/proc/<pid>/task/<tid>/schedstat``: run ns, wait ns, time slices; any
kernel with ``CONFIG_SCHED_INFO``).  Of the time the daemon's threads were runnable, the
share spent waiting was 0.12–0.37 on a quiet 2-core box (its own threads outnumber the
cores at moments) and 0.52–0.54 beside two CPU hogs, which stalled streams that
admission had let in (docs/scheduling.md, "Where 32 streams stand").  ``stats`` reports
it as ``scheduler.cpu_wait`` and ``/metrics`` as ``ttsd_cpu_wait_ratio``; admission shrinks
its load limit by it (appliance.core.admission).

Threads: :meth:`RunQueueWait.sample` runs on the inference workers after each item (procfs
reads: file I/O stays off the event loop); it reads at most once per ``min_interval_s`` and
skips when another worker is reading.  The loop reads :attr:`RunQueueWait.share`, a float
written whole.  Bounds: one pair of integers per live thread, replaced at each read.  A
thread counts from its second read (a new one's totals are not this interval's), and a
thread that ended drops out.  Without schedstat (another OS, or a kernel without it),
``share`` stays None.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

Totals = dict[int, tuple[int, int]]
"""Run and run-queue wait nanoseconds, by thread id."""


def read_totals(tasks: Path) -> Totals | None:
    """Each thread's (run ns, wait ns) under ``tasks`` (``/proc/<pid>/task``); None when
    there is no schedstat to read."""
    out: Totals = {}
    try:
        entries = list(os.scandir(tasks))
    except OSError:
        return None
    for entry in entries:
        try:
            fields = (Path(entry.path) / "schedstat").read_text().split()
            out[int(entry.name)] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile, or a field the kernel does not give
    return out or None


class RunQueueWait:
    """The share of the process's runnable time spent waiting for a CPU, lately."""

    def __init__(
        self,
        tasks: Path | None = None,
        min_interval_s: float = 1.0,
        min_runnable_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``min_runnable_s``: a share is taken once the threads were runnable this long
        since the last one (an idle daemon keeps the share it had)."""
        self._tasks = tasks if tasks is not None else Path(f"/proc/{os.getpid()}/task")
        self._min_interval_s = min_interval_s
        self._min_runnable_ns = int(min_runnable_s * 1e9)
        self._clock = clock
        self._lock = threading.Lock()
        self._last: Totals = {}
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
            self._read_at = now
            totals = read_totals(self._tasks)
            if totals is None:
                return
            run, wait = self._pending
            for tid, (r, w) in totals.items():
                if (before := self._last.get(tid)) is not None:
                    run += max(0, r - before[0])
                    wait += max(0, w - before[1])
            self._last = totals
            if run + wait >= self._min_runnable_ns:
                self.share = wait / (run + wait)
                run = wait = 0
            self._pending = (run, wait)
        finally:
            self._lock.release()
