"""The threads' run-queue wait: a fake ``/proc/<pid>/task`` tree for the arithmetic, and
this process's own for the real kernel's."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from appliance.ops.cpuwait import RunQueueWait, read_totals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write(tasks: Path, tid: int, run_ns: int, wait_ns: int) -> None:
    (tasks / str(tid)).mkdir(parents=True, exist_ok=True)
    (tasks / str(tid) / "schedstat").write_text(f"{run_ns} {wait_ns} 7\n")


def test_the_share_is_of_the_runnable_time_since_the_last_read(tmp_path: Path) -> None:
    clock = Clock()
    write(tmp_path, 1, 5_000_000_000, 1_000_000_000)
    wait = RunQueueWait(tmp_path, min_interval_s=1.0, min_runnable_s=0.2, clock=clock)
    wait.sample()
    assert wait.share is None  # totals since the thread began are not this interval's
    write(tmp_path, 1, 5_300_000_000, 1_300_000_000)  # ran 0.3 s, waited 0.3 s
    write(tmp_path, 2, 9_000_000_000, 9_000_000_000)  # new: counts from its next read
    clock.now += 0.5
    wait.sample()
    assert wait.share is None  # read at most once a second
    clock.now += 0.5
    wait.sample()
    assert wait.share == 0.5
    write(tmp_path, 1, 5_400_000_000, 1_300_000_000)  # 0.1 s runnable: too little alone
    write(tmp_path, 2, 9_100_000_000, 9_000_000_000)  # ... with this, 0.2 s, no wait
    clock.now += 1.0
    wait.sample()
    assert wait.share == 0.0


def test_a_thread_that_ended_drops_out_and_an_idle_daemon_keeps_its_share(
    tmp_path: Path,
) -> None:
    clock = Clock()
    write(tmp_path, 1, 1_000_000_000, 0)
    write(tmp_path, 2, 1_000_000_000, 0)
    wait = RunQueueWait(tmp_path, min_runnable_s=0.2, clock=clock)
    wait.sample()
    write(tmp_path, 1, 1_200_000_000, 200_000_000)
    (tmp_path / "2" / "schedstat").unlink()
    (tmp_path / "2").rmdir()
    clock.now += 1.0
    wait.sample()
    assert wait.share == 0.5
    clock.now += 1.0
    wait.sample()  # nothing ran: the share stays
    assert wait.share == 0.5


def test_no_schedstat_leaves_no_share(tmp_path: Path) -> None:
    assert read_totals(tmp_path / "absent") is None
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "schedstat").write_text("garbage\n")
    assert read_totals(tmp_path) is None
    wait = RunQueueWait(tmp_path / "absent", min_interval_s=0.0)
    wait.sample()
    assert wait.share is None


def test_this_process_threads_are_read_from_the_real_kernel() -> None:
    """Three threads hashing (hashlib lets go of the GIL) on this box's CPUs, read while
    they live: a share between 0 and 1 comes back."""
    wait = RunQueueWait(min_interval_s=0.0, min_runnable_s=0.1)
    data = b"x" * 4_000_000
    started, done = threading.Barrier(4), threading.Event()

    def work() -> None:
        started.wait()
        stop = time.monotonic() + 0.4
        while time.monotonic() < stop:
            hashlib.sha256(data).digest()
        done.wait()  # alive until read: an ended thread drops out

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    wait.sample()  # the workers' first read
    started.wait()
    time.sleep(0.5)
    wait.sample()
    done.set()
    for t in threads:
        t.join()
    assert wait.share is not None and 0.0 <= wait.share <= 1.0
