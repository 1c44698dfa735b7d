"""How many ONNX Runtime threads a worker's sessions use, whether they spin, and where
they run: :func:`cpu_plan` gives a start all three from one read of the CPUs."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from appliance.ops.config import Config
from appliance.ops.cpuquota import capped_cpus, usable_cpus


def cpu_threads(cfg: Config, cpus: float | None = None) -> int:
    """Intra-op threads per worker: by default the CPUs this process may use (its CPU quota
    rounded up, where that is fewer: appliance.ops.cpuquota) shared out between the
    workers, at least one each, so that the workers' threads together never outnumber
    the CPUs.

    On 2 CPUs with the default two workers that is one thread each.  Two each (every CPU,
    the default until stop 61) made a burst of eight streams wait longer for its last first
    packet (P95 190–238 against 166–183 ms) and sixteen streams too (86–155 against
    57–103 ms): each 2-thread run then shares its cores with the other worker's, and waits
    for a pool thread that is not running.  A lone request lost ~1.3 ms of a 30 ms first
    packet with one thread (docs/scheduling.md, "Threads per worker").  ``cpus``: what
    :func:`~appliance.ops.cpuquota.usable_cpus` said, where the caller has read it already.
    """
    if cfg.engine.intra_op_threads:
        return cfg.engine.intra_op_threads
    # The affinity, capped by the quota, over the workers.
    whole = math.ceil(usable_cpus() if cpus is None else cpus)
    return max(1, whole // cfg.engine.workers)


def spin_wait(cfg: Config, threads: int, cpus: float | None = None) -> bool:
    """By default spin only when all workers' threads together leave a CPU free (of the
    quota, under one: a spinning thread spends it).

    Spinning threads hold their cores between ops.  When they hold every core, the event
    loop, the frontend and the clients on the same box wait for them: one worker of two
    spinning threads on 2 CPUs gave a short command its first packet in 61–70 ms, against
    37–38 ms without spinning (docs/scheduling.md).
    """
    return {
        "on": True,
        "off": False,
        "auto": threads > 1
        and threads * cfg.engine.workers < (usable_cpus() if cpus is None else cpus),
    }[cfg.engine.spin_wait]


@dataclass(frozen=True)
class Pinning:
    """The CPU of each inference worker and of a session's pool threads."""

    workers: tuple[int, ...]
    """Worker k runs on ``workers[k]``."""
    pool: tuple[int, ...]
    """One CPU for each of a session's ``threads - 1`` pool threads (ONNX Runtime runs the
    rest of a run on the calling worker)."""


def pinning(cfg: Config, threads: int) -> Pinning | None:
    """Worker k on the k-th CPU this process may use, a session's pool threads on the last
    ones; None when off, or when there are no pool threads or not enough CPUs to pin.

    Unpinned, after a second or more of quiet the kernel here put a lone run's pool thread
    on its caller's CPU: the two took turns instead of sharing the work, and the short
    command's first packet came ~5 ms later (17 → 22 ms) than right after another request.
    With worker 0 (the one a lone request gets, see the scheduler) on a CPU of its own,
    that cannot happen.  A second worker shares its CPU with a pool thread; in a burst
    either of them takes the parallel work the other has not started.
    """
    if cfg.engine.pin_threads == "off" or threads < 2:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    n = len(cpus)
    if threads > n or cfg.engine.workers > n:
        return None
    return Pinning(
        workers=tuple(cpus[: cfg.engine.workers]),
        pool=tuple(cpus[n - 1 - i] for i in range(threads - 1)),
    )


@dataclass(frozen=True)
class CpuPlan:
    """What one read of the CPU quota gives a start: every voice's sessions and the
    scheduler's workers are sized and placed from the same figures."""

    quota: float | None
    """The cgroup's CPU quota (appliance.ops.cpuquota), None where there is none."""
    threads: int
    """Intra-op threads of each worker's sessions (:func:`cpu_threads`)."""
    spin: bool
    """Whether those threads spin between ops (:func:`spin_wait`)."""
    pins: Pinning | None
    """Where the workers and the sessions' pool threads run (:func:`pinning`)."""
    own_cores: bool = False
    """Each worker's runs keep to one CPU of their own: one thread per session and no more
    workers than CPUs (the quota's), so two workers' runs never share a core
    (``Scheduler.own_cores``)."""


def cpu_plan(cfg: Config, quota: float | None, *, pin: bool = True) -> CpuPlan:
    """The plan for ``quota`` (what :func:`~appliance.ops.cpuquota.cpu_quota` read) and
    this process's affinity; ``pin``: False for sessions loaded outside a daemon (a probe,
    a test), which place no threads."""
    cpus = capped_cpus(quota)
    threads = cpu_threads(cfg, cpus)
    pins = pinning(cfg, threads) if pin else None
    own = own_cores(threads, cfg.engine.workers, cpus)
    return CpuPlan(quota, threads, spin_wait(cfg, threads, cpus), pins, own)


def own_cores(threads: int, workers: int, cpus: float) -> bool:
    """Whether each worker's runs keep to one CPU of their own: sessions of one thread and
    no more workers than ``cpus`` (the affinity's, capped by a CPU quota)."""
    return threads == 1 and workers <= cpus
