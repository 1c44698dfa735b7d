"""A CPU quota changed while the daemon serves (appliance.quotawatch): read again on a
timer and on SIGHUP, applied to the scheduler and admission, the sessions' sizing
reported; on fake cgroup trees in process, and the real daemon in a real cgroup."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.core.runtime import Runtime
from appliance.core.scheduler import Scheduler
from appliance.core.service import Service
from appliance.model.engine.threads import CpuPlan
from appliance.ops.config import parse_config
from appliance.ops.metrics import Metrics
from appliance.quotawatch import QuotaWatch
from tests.cgroups import PROC, V2_MOUNT, fake_tree
from tests.conftest import DaemonFactory


def _tree(root: Path, cpu_max: str) -> Path:
    """A cgroup v2 container whose ``cpu.max`` reads ``cpu_max``."""
    return fake_tree(root, "0::/\n", [PROC, V2_MOUNT], {"/sys/fs/cgroup/cpu.max": cpu_max})


def _service() -> Service:
    # A runtime with no voices: the watch reads only its config and scheduler.  One worker,
    # whose sessions' threads follow the quota (two workers on 2 CPUs have one each under
    # any quota).
    runtime = Runtime(parse_config({"engine": {"workers": 1}}), {}, "none", Scheduler(1), Metrics())
    return Service(runtime)


async def _until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


def test_a_changed_quota_is_applied_on_the_next_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Half a CPU, then none: the scheduler and admission count each from the next read;
    an unchanged quota says nothing; a sizing the new quota would change is reported."""
    root = _tree(tmp_path, "50000 100000\n")
    service = _service()
    sched = service.runtime.scheduler
    tasks: list[asyncio.Task[Any]] = []

    async def scenario() -> None:
        watch = QuotaWatch(lambda: service, tasks.append, every_s=0.02, root=root)
        watch.start()
        await _until(lambda: sched.quota == 0.5)
        assert service.admission.workers == 0.5 and sched.cpu_wait.quota == 0.5
        assert sched.snapshot()["cpu_quota"] == 0.5
        said = len(caplog.records)
        await asyncio.sleep(0.1)  # five more reads of the same quota
        assert len(caplog.records) == said, [r.getMessage() for r in caplog.records]
        (root / "sys/fs/cgroup/cpu.max").write_text("max 100000\n")
        await _until(lambda: sched.quota is None)
        assert service.admission.workers == 1.0 and sched.cpu_wait.quota is None
        for t in tasks:
            t.cancel()

    with caplog.at_level(logging.INFO, logger="ttsd"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert "CPU quota now 0.5 CPUs (was none): admission counts 0.50 workers' worth" in lines
    assert "CPU quota now none (was 0.5 CPUs): admission counts 1.00 workers' worth" in lines
    resize = [ln for ln in lines if "restart ttsd to size them again" in ln]
    if len(os.sched_getaffinity(0)) >= 2:
        # Sized at start under half a CPU (one thread); without a quota, one per CPU.
        assert resize and resize[0].startswith("the inference sessions run 1 thread"), lines
    else:
        assert not resize, lines


def test_a_check_reads_the_quota_once_when_asked(tmp_path: Path) -> None:
    """SIGHUP's read (the daemon's reload calls ``check``): applied before it returns."""
    root = _tree(tmp_path, "50000 100000\n")
    service = _service()

    async def scenario() -> None:
        await QuotaWatch(lambda: service, lambda t: None, root=root).check()

    asyncio.run(scenario())
    assert service.runtime.scheduler.quota == 0.5 and service.admission.workers == 0.5


def test_the_daemon_follows_its_quota_raised_on_sighup(
    half_a_cpu: Path, daemon_factory: DaemonFactory
) -> None:
    """The real daemon in a cgroup of half a CPU, raised to one and a half: a SIGHUP
    applies it, and the log says the sessions' threads need a restart to follow (one
    worker: its sessions' threads follow the quota)."""
    from appliance.clients.client import Client

    d = daemon_factory({"engine": {"workers": 1}}, cgroup=half_a_cpu)
    with Client(d.socket) as c:
        assert c.stats()["admission"]["capacity"] == 0.5
        (half_a_cpu / "cpu.cfs_quota_us").write_text("150000")
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while "CPU quota now 1.5 CPUs (was 0.5 CPUs)" not in d.log():
            assert d.alive() and time.monotonic() < deadline, d.log()[-3000:]
            time.sleep(0.05)
        stats = c.stats()
        assert stats["scheduler"]["cpu_quota"] == 1.5
        assert stats["admission"]["capacity"] == 1.0  # one worker's worth at most
        done = c.synthesize_all("A little more room to breathe.")
    assert done.duration_ms > 1000 and not done.cancelled
    assert "the inference sessions run 1 thread, sized for the old quota" in d.log()


@pytest.mark.parametrize(("threads", "own_unlimited"), [(1, True), (2, False)])
def test_workers_have_cores_of_their_own_only_while_the_quota_leaves_one_each(
    monkeypatch: pytest.MonkeyPatch, threads: int, own_unlimited: bool
) -> None:
    """Two workers on 2 CPUs with one-thread sessions run a lone request's next encode
    beside its first item (``Scheduler.own_cores``); under a quota of 1.5 CPUs they share
    them, and a quota lifted gives the cores back.  Two-thread sessions share cores
    whatever the quota."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    cfg = parse_config({"engine": {"workers": 2}})
    plan = CpuPlan(None, threads, False, None, threads == 1)
    runtime = Runtime(cfg, {}, "none", Scheduler(2, own_cores=plan.own_cores), Metrics(), plan=plan)
    service = Service(runtime)
    service.set_cpu_quota(1.5)
    assert runtime.scheduler.own_cores is False
    service.set_cpu_quota(None)
    assert runtime.scheduler.own_cores is own_unlimited
    service.set_cpu_quota(2.0)
    assert runtime.scheduler.own_cores is own_unlimited
