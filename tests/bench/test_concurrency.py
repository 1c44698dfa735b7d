"""The concurrency bench's CPU hogs (bench.concurrency.CpuHogs): real busy processes for
the length of a block, none left behind."""

from __future__ import annotations

import time

import psutil

from bench.concurrency import CpuHogs


def test_hogs_burn_cpu_inside_the_block_and_are_gone_after_it() -> None:
    me = psutil.Process()
    with CpuHogs(2):
        hogs = [c for c in me.children() if c.name() == "yes"]
        assert len(hogs) == 2
        before = [sum(h.cpu_times()[:2]) for h in hogs]
        time.sleep(0.5)
        burnt = [sum(h.cpu_times()[:2]) - b for h, b in zip(hogs, before, strict=True)]
        assert all(b > 0.05 for b in burnt), burnt  # each ran, even on a busy box
    assert not [c for c in me.children() if c.name() == "yes"]
    assert not any(h.is_running() and h.status() != psutil.STATUS_ZOMBIE for h in hogs)
