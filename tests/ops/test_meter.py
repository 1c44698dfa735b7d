"""The model's runs by part (appliance.ops.meter)."""

from __future__ import annotations

import threading
import time

import pytest

from appliance.ops.meter import KEEP_WARM, PartCost, RunMeter


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_run_counts_its_frames_wall_and_the_threads_cpu() -> None:
    meter = RunMeter()
    with meter.timed("decoder", 64):
        _burn(0.02)
    with meter.timed("decoder", 32):
        time.sleep(0.02)  # wall time, next to no CPU
    cost = meter.snapshot()["decoder"]
    assert (cost.runs, cost.frames) == (2, 96)
    assert cost.wall_s >= 0.04
    assert 0.02 <= cost.cpu_s < cost.wall_s


def test_frames_known_only_after_the_run_are_set_on_it() -> None:
    meter = RunMeter()
    with meter.timed("prior") as run:
        run.frames = 160
    assert meter.snapshot()["prior"].frames == 160


def test_a_failed_run_counts_too() -> None:
    meter = RunMeter()
    with pytest.raises(RuntimeError), meter.timed("flow", 8):
        raise RuntimeError("session failed")
    assert meter.snapshot()["flow"].runs == 1


def test_a_snapshot_is_a_copy_by_part() -> None:
    meter = RunMeter()
    with meter.timed("flow", 8):
        pass
    snap = meter.snapshot()
    with meter.timed("flow", 8):
        pass
    assert snap["flow"].runs == 1
    assert meter.snapshot()["flow"].runs == 2
    assert list(meter.snapshot()) == ["flow"]
    assert PartCost(2, 0.0012, 0.0004, 16).as_dict() == {
        "runs": 2,
        "wall_s": 0.001,
        "cpu_s": 0.0,
        "frames": 16,
    }


def test_threads_counting_at_once_lose_nothing() -> None:
    meter = RunMeter()

    def count() -> None:
        for _ in range(2000):
            with meter.timed("decoder", 1):
                pass

    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cost = meter.snapshot()["decoder"]
    assert (cost.runs, cost.frames) == (8000, 8000)


def test_runs_counted_as_another_part_on_this_thread_only() -> None:
    """The keep-warm touches run the prior, the flow and the decoder; they count as
    ``keep_warm`` while a request's runs on another worker count as their own."""
    meter = RunMeter()
    inside = threading.Event()
    release = threading.Event()

    def other_worker() -> None:
        inside.wait(5)
        with meter.timed("decoder", 64):
            pass
        release.set()

    t = threading.Thread(target=other_worker)
    t.start()
    with meter.counted_as(KEEP_WARM):
        with meter.timed("prior") as run:
            run.frames = 3
        with meter.timed("flow", 1):
            inside.set()
            release.wait(5)
    t.join(5)
    with meter.timed("prior", 10):
        pass  # outside: its own part again
    snap = meter.snapshot()
    assert (snap[KEEP_WARM].runs, snap[KEEP_WARM].frames) == (2, 4)
    assert (snap["decoder"].runs, snap["prior"].runs, "flow" in snap) == (1, 1, False)
