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
    """By default spin only when all workers' threads together leave a CPU free.

    Spinning threads hold their cores between ops.  When they hold every core, the event
    loop, the frontend and the clients on the same box wait for them: one worker of two
    spinning threads on 2 CPUs gave a short command its first packet in 61–70 ms, against
    37–38 ms without spinning (docs/scheduling.md).
    """
    return {
        "on": True,
        "off": False,
        "auto": threads > 1 and threads * cfg.engine.workers < len(os.sched_getaffinity(0)),
    }[cfg.engine.spin_wait]
