"""A serving daemon's CPU quota, read again: every :data:`QUOTA_EVERY_S` and on SIGHUP.

A quota changes under a running service: ``systemctl set-property ttsd CPUQuota=150%``,
``docker update --cpus``, a Kubernetes pod resized in place.  None of them tells the
process.  Read only at start, a daemon whose quota was raised kept admitting for the old
one, and one whose quota was cut kept admitting for CPU it no longer had (under a 1-CPU
quota counted as two: 7–17 stalls at 16 streams asked; docs/scheduling.md).

A change applies at once to what is counted (admission's workers' worth, the idle wait
estimate; :meth:`~appliance.core.service.Service.set_cpu_quota`).  The ONNX Runtime
sessions' threads and spin-waiting are fixed when a session is made: when the new quota
would size them otherwise, the log says so, once per change, and a restart sizes them.

Bounds: one read at a time, in a worker thread (a few small files of ``/proc`` and the
cgroup tree, :mod:`appliance.ops.cpuquota`).  Lifecycle: made with the daemon, started
once its doors are up (:meth:`QuotaWatch.start`); its task is the daemon's, cancelled at stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.ops.cpuquota import cpu_quota

if TYPE_CHECKING:
    from appliance.core.service import Service
    from appliance.ops.config import Config

log = logging.getLogger("ttsd")

QUOTA_EVERY_S = 10.0
"""How often the quota is read again (and on SIGHUP)."""


class QuotaWatch:
    """Reads the CPU quota again and applies a change (see the module)."""

    def __init__(
        self,
        service: Callable[[], Service],
        keep: Callable[[asyncio.Task[Any]], None],
        every_s: float = QUOTA_EVERY_S,
        root: Path = Path("/"),
    ) -> None:
        """``root``: where the ``/proc`` and cgroup trees start (tests give a fake one)."""
        self._service = service
        self._keep = keep
        self.every_s = every_s
        self.root = root
        self._lock = asyncio.Lock()
        self._sized: tuple[int, bool] | None = None
        """The sessions' (threads, spin) as the start sized them."""

    def start(self) -> None:
        """Read again every :attr:`every_s` from now on."""
        self._keep(asyncio.get_running_loop().create_task(self._loop()))

    async def _loop(self) -> None:
        runtime = self._service().runtime
        if runtime.plan is not None:  # as the start sized them, from its own read
            self._sized = (runtime.plan.threads, runtime.plan.spin)
        else:
            read = asyncio.get_running_loop().run_in_executor
            _, self._sized = await read(None, self._read, runtime.config)
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self.check()
            except Exception as exc:  # a bug: said once per read, the daemon serves on
                log.error("CPU quota check failed: %s", exc)

    async def check(self) -> None:
        """Read the quota (in a worker) and apply it if it changed."""
        async with self._lock:
            service = self._service()
            cfg = service.runtime.config
            read = asyncio.get_running_loop().run_in_executor
            quota, sized = await read(None, self._read, cfg)
            old = service.runtime.scheduler.quota
            if quota == old:
                return
            service.set_cpu_quota(quota)
            log.info(
                "CPU quota now %s (was %s): admission counts %.2f workers' worth",
                _cpus(quota),
                _cpus(old),
                service.admission.workers,
            )
            if self._sized is not None and sized != self._sized:
                log.warning(
                    "the inference sessions run %s, sized for the old quota; %s would "
                    "suit this one: restart ttsd to size them again",
                    _threads(self._sized),
                    _threads(sized),
                )

    def _read(self, cfg: Config) -> tuple[float | None, tuple[int, bool]]:
        """On a worker: the quota and the sessions' (threads, spin) it would give."""
        from appliance.model.engine.threads import cpu_plan

        plan = cpu_plan(cfg, cpu_quota(self.root), pin=False)
        return plan.quota, (plan.threads, plan.spin)


def _cpus(quota: float | None) -> str:
    return "none" if quota is None else f"{quota:g} CPUs"


def _threads(sized: tuple[int, bool]) -> str:
    threads, spin = sized
    return f"{threads} thread{'s' if threads != 1 else ''}{' spin-waiting' if spin else ''}"
