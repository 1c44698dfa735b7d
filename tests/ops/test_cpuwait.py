"""The threads' run-queue wait: a fake ``/proc/<pid>/task`` tree and ``/proc/stat`` for the
arithmetic, and this process's own and the box's for the real kernel's."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from appliance.ops.cpuwait import BoxTicks, RunQueueWait, expected_wait, read_box, read_totals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write(tasks: Path, tid: int, run_ns: int, wait_ns: int) -> None:
    (tasks / str(tid)).mkdir(parents=True, exist_ok=True)
    (tasks / str(tid) / "schedstat").write_text(f"{run_ns} {wait_ns} 7\n")


def write_stat(stat: Path, busy: int, idle: int) -> None:
    """A 2-CPU ``/proc/stat``: ``busy`` ticks in user and system, ``idle`` in idle and
    iowait (the per-CPU lines carry no figure the reading uses but their count)."""
    user, system = busy - busy // 4, busy // 4
    cpu = f"{user} 0 {system} {idle - 10} 10 0 0 0 0 0"
    stat.write_text(f"cpu  {cpu}\ncpu0 {cpu}\ncpu1 {cpu}\nintr 1 2 3\nctxt 9\n")


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


def test_the_box_reading_counts_busy_ticks_and_cpus(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice: guest is within user
    stat.write_text("cpu  100 5 30 400 20 1 2 3 50 0\ncpu0 x\ncpu1 x\ncpu2 x\nintr 1\n")
    assert read_box(stat) == BoxTicks(busy=141, total=561, cpus=3)
    assert read_box(tmp_path / "absent") is None
    many = "".join(f"cpu{n} 1 0 1 8 0 0 0 0 0 0\n" for n in range(4000))  # past one read
    stat.write_text(f"cpu  7 0 1 80 2 0 0 0 0 0\n{many}intr {'0 ' * 20_000}\nctxt 9\n")
    assert read_box(stat) == BoxTicks(busy=8, total=90, cpus=4000)
    stat.write_text("cpu  1 2 x 4\ncpu0 1\n")
    assert read_box(stat) is None


def test_the_wait_a_burst_would_meet_is_the_cores_it_would_share() -> None:
    assert expected_wait(others=2.0, threads=2, cpus=2) == 0.5  # two hogs, two workers
    assert abs(expected_wait(others=1.0, threads=2, cpus=2) - 1 / 3) < 1e-12
    assert expected_wait(others=0.0, threads=2, cpus=2) == 0.0
    assert expected_wait(others=2.0, threads=2, cpus=4) == 0.0  # a core each: no wait
    assert expected_wait(others=6.0, threads=1, cpus=2) == 5 / 7


def test_under_a_cpu_quota_a_burst_waits_for_the_next_period() -> None:
    """A quota of one CPU for two busy workers: each runs half the time, on an idle box too
    (schedstat counts the throttled time as waiting: measured 0.75 for two threads under
    half a CPU)."""
    assert expected_wait(others=0.0, threads=2, cpus=2, quota=1.0) == 0.5
    assert expected_wait(others=0.0, threads=2, cpus=2, quota=0.5) == 0.75
    assert expected_wait(others=0.0, threads=1, cpus=2, quota=1.0) == 0.0
    assert expected_wait(others=2.0, threads=2, cpus=2, quota=1.5) == 0.5  # the cores bind
    assert expected_wait(others=0.0, threads=2, cpus=2, quota=None) == 0.0


def test_an_idle_daemon_reads_the_other_processes_cpu(tmp_path: Path) -> None:
    """Idle intervals take the wait from the box's busy time less the daemon's own; an
    interval with enough runnable time still measures its threads."""
    clock, tasks, stat = Clock(), tmp_path / "task", tmp_path / "stat"
    wait = RunQueueWait(tasks, min_runnable_s=0.2, clock=clock, stat=stat, threads=2)
    run_ns, wait_ns, busy, idle = 1_000_000_000, 1_000_000_000, 10_000, 10_000

    def interval(ran_s: float, waited_s: float, busy_ticks: int) -> float | None:
        """One second on 2 CPUs (200 ticks at 100 Hz, 100 a core), ``busy_ticks`` of them
        busy; the daemon's thread ran ``ran_s`` and waited ``waited_s``."""
        nonlocal run_ns, wait_ns, busy, idle
        run_ns, wait_ns = run_ns + int(ran_s * 1e9), wait_ns + int(waited_s * 1e9)
        busy, idle = busy + busy_ticks, idle + 200 - busy_ticks
        write(tasks, 1, run_ns, wait_ns)
        write_stat(stat, busy, idle)
        clock.now += 1.0
        wait.sample()
        return wait.share

    interval(0.0, 0.0, 0)  # the first read: nothing to compare with yet
    assert wait.share is None
    # Two hogs take both cores; the daemon's thread ran 10 ms of them.
    assert interval(0.01, 0.0, 200) == pytest.approx(expected_wait(1.99, 2, 2))
    assert abs(expected_wait(1.99, 2, 2) - 0.5) < 0.002
    # They stop: the box's busy time is the daemon's own 0.15 s and a little more.
    assert interval(0.15, 0.0, 16) == pytest.approx(expected_wait(0.01, 2, 2))
    # 0.1 s runnable: too little alone, and the 0.15 s before it was read already.
    assert interval(0.05, 0.05, 200) == pytest.approx(expected_wait(2 - 0.05, 2, 2))
    # A burst: 0.4 s runnable, a quarter of it waiting; its own threads say so.
    assert interval(0.3, 0.1, 200) == 0.25


def test_without_the_box_reading_an_idle_daemon_keeps_its_share(tmp_path: Path) -> None:
    clock, tasks = Clock(), tmp_path / "task"
    wait = RunQueueWait(tasks, clock=clock, stat=tmp_path / "absent", threads=2)
    write(tasks, 1, 1_000_000_000, 0)
    wait.sample()
    write(tasks, 1, 1_300_000_000, 100_000_000)
    clock.now += 1.0
    wait.sample()
    assert wait.share == 0.25
    clock.now += 1.0
    wait.sample()
    assert wait.share == 0.25


def test_an_idle_process_reads_the_real_box() -> None:
    """This process idles (its threads cannot be runnable 1000 s in a second): the share
    comes from the real ``/proc/stat``, whatever else this box runs."""
    box = read_box(Path("/proc/stat"))
    assert box is not None and box.cpus >= 1 and 0 < box.busy < box.total
    wait = RunQueueWait(min_interval_s=0.0, min_runnable_s=1000.0, threads=2)
    wait.sample()
    time.sleep(0.3)
    wait.sample()
    assert wait.share is not None and 0.0 <= wait.share < 1.0


def test_a_daemon_confined_to_some_cpus_counts_only_theirs(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  300 0 0 100 0 0 0 0 0 0\n"
        "cpu0 100 0 0 0 0 0 0 0 0 0\n"  # busy all along: a hog on a CPU the daemon may not use
        "cpu1 100 0 0 0 0 0 0 0 0 0\n"
        "cpu2 100 0 0 50 0 0 0 0 0 0\n"
        "cpu3 0 0 0 50 0 0 0 0 0 0\n"
        "intr 1\n"
    )
    assert read_box(stat) == BoxTicks(busy=300, total=400, cpus=4)
    assert read_box(stat, {2, 3}) == BoxTicks(busy=100, total=200, cpus=2)
    assert read_box(stat, {7}) is None  # none of the allowed CPUs listed


def test_hogs_on_cpus_the_daemon_may_not_use_are_no_wait(tmp_path: Path) -> None:
    def box(t: int) -> str:
        # After t seconds at 100 ticks a second: CPUs 0 and 1 always busy (two hogs),
        # CPUs 2 and 3 always idle.
        busy, idle = f"{100 * t} 0 0 0 0", f"0 0 0 {100 * t} 0"
        lines = [f"cpu  {200 * t} 0 0 {200 * t} 0", *(f"cpu{n} {busy}" for n in (0, 1))]
        return "\n".join([*lines, *(f"cpu{n} {idle}" for n in (2, 3)), "intr 1\n"])

    for allowed, want in (({2, 3}, 0.0), (None, expected_wait(2.0, 2, 4))):
        clock, tasks, stat = Clock(), tmp_path / str(allowed) / "task", tmp_path / "stat"
        wait = RunQueueWait(tasks, clock=clock, stat=stat, threads=2, allowed=allowed)
        write(tasks, 1, 0, 0)
        for t in (1, 2):  # two reads a second apart; the daemon's thread idle
            stat.write_text(box(t))
            clock.now += 1.0
            wait.sample()
        assert wait.share == want, allowed
    # Confined to CPUs 0 and 1, the hogs are all it shares.
    wait = RunQueueWait(tasks, clock=clock, stat=stat, threads=2, allowed={0, 1})
    for t in (1, 2):
        stat.write_text(box(t))
        clock.now += 1.0
        wait.sample()
    assert wait.share == expected_wait(2.0, 2, 2) == 0.5
