"""How many ONNX Runtime threads a worker's sessions use, whether they spin, and where
they run."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from appliance.ops.config import Config
from appliance.ops.cpuquota import usable_cpus


def cpu_threads(cfg: Config, cpus: float | None = None) -> int:
    """Intra-op threads per worker: by default every CPU this process may use, and no more
    than its CPU quota rounds up to (appliance.ops.cpuquota).

    A lone request then gets the whole machine (short command: 42 ms to first packet
    instead of 59 with one thread); when both workers are busy the threads share the
    cores without spin-waiting (see :func:`spin_wait`).  Threads beyond a quota only use
    up each period's share sooner and then wait, frozen, for the next.  ``cpus``: what
    :func:`~appliance.ops.cpuquota.usable_cpus` said, where the caller has read it already.
    """
    if cfg.engine.intra_op_threads:
        return cfg.engine.intra_op_threads
    # The affinity, capped by the quota.
    return max(1, math.ceil(usable_cpus() if cpus is None else cpus))


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
