"""Scheduling priority for the audio callback thread.

Called once from inside the PortAudio callback thread.  Both calls act on the calling
thread only (Linux schedules threads, and ``sched_setscheduler(0, ...)`` and
``setpriority(PRIO_PROCESS, tid, ...)`` name one thread), so the rest of the daemon keeps
its normal priority.  Real-time needs CAP_SYS_NICE or an RLIMIT_RTPRIO allowance (the
systemd unit grants it); a lower nice value needs CAP_SYS_NICE or RLIMIT_NICE.  Neither
being allowed is normal for a user session and is not an error.
"""

from __future__ import annotations

import os
import threading


def apply_audio_thread_priority(realtime_priority: int, nice: int) -> str:
    """Raise the calling thread's priority as far as allowed; say what was applied.

    Returns ``"SCHED_FIFO <prio>"``, ``"nice <n>"`` or ``"none"`` (for ``health``).
    """
    if realtime_priority > 0 and hasattr(os, "sched_setscheduler"):
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(realtime_priority))
            return f"SCHED_FIFO {realtime_priority}"
        except OSError:
            pass  # not permitted here: try the nice value below
    if nice < 0:
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            return f"nice {nice}"
        except OSError:
            pass
    return "none"


def describe_current_thread() -> str:
    """The calling thread's policy in the same words (used by tests and ``health``)."""
    policy = os.sched_getscheduler(0)
    if policy == os.SCHED_FIFO:
        return f"SCHED_FIFO {os.sched_getparam(0).sched_priority}"
    n = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    return f"nice {n}" if n != 0 else "none"
