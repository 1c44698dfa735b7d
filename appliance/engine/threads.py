"""How many ONNX Runtime threads a worker's sessions use, and whether they spin."""

from __future__ import annotations

import os

from appliance.config import Config


def cpu_threads(cfg: Config) -> int:
    """Intra-op threads per worker: by default every CPU this process may use.

    A lone request then gets the whole machine (short command: 42 ms to first packet
    instead of 59 with one thread); when both workers are busy the threads share the
    cores without spin-waiting (see :func:`spin_wait`).
    """
    if cfg.engine.intra_op_threads:
        return cfg.engine.intra_op_threads
    return max(1, len(os.sched_getaffinity(0)))


def spin_wait(cfg: Config, threads: int) -> bool:
    """By default spin only when all workers' threads together fit on the CPUs we may use."""
    return {
        "on": True,
        "off": False,
        "auto": threads > 1 and threads * cfg.engine.workers <= len(os.sched_getaffinity(0)),
    }[cfg.engine.spin_wait]
