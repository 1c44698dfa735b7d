"""What a serving daemon tells systemd, and its quiet-moment upkeep.

- ``READY=1`` with a status line once it serves (and again after each reload), and the
  ready line in the log; an owed READY (the manager's queue was full) goes out with the
  next watchdog ping or, without a watchdog, from a task until it is delivered.
- ``STATUS=`` at most every :data:`STATUS_EVERY_S` as requests end.
- The watchdog: pings while the inference workers' heartbeat is fresh (a hung inference
  call stops them, and systemd restarts the service).
- Freed memory handed back (:meth:`~appliance.core.runtime.Runtime.release_memory`: ONNX
  Runtime's free arena regions, then ``malloc_trim``) at most every :data:`TRIM_EVERY_S`
  and about that long after a request or the idle warm-up ended, busy or idle, so RSS
  stays flat over long runs; not while real-time work is queued or running, unless that
  lasts :data:`TRIM_WAIT_S` (see :meth:`Upkeep._trim`).
- What start-up made frozen again after a reload thawed it (:meth:`Upkeep.thawed`), at
  the first trim that finds no connection open and no request in flight.

Lifecycle: one per daemon once its service is built; every task it starts is given to the
daemon (``keep``), which cancels them at its stop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

from appliance.ops import memory
from appliance.ops.notify import Notifier, settle_owed, watchdog_interval_s, watchdog_loop

if TYPE_CHECKING:
    from appliance.core.runtime import Runtime
    from appliance.playback import Player

log = logging.getLogger("ttsd")

STATUS_EVERY_S = 2.0
TRIM_EVERY_S = 10.0
TRIM_WAIT_S = 30.0
"""The longest a due trim waits for the real-time work to pause (checked every
:data:`TRIM_RETRY_S`)."""
TRIM_RETRY_S = 0.25
REFREEZE_RETRY_S = 60.0
"""After a reload, how often a trim looks again for a moment with nobody connected to
freeze in (each trim before the freeze walks every object: 15–80 ms here)."""


class Upkeep:
    """The daemon's systemd notices and heap trims (see the module)."""

    def __init__(
        self,
        notifier: Notifier,
        runtime: Callable[[], Runtime],
        keep: Callable[[asyncio.Task[Any]], None],
        unattended: Callable[[], bool] = lambda: False,
    ) -> None:
        self.notifier = notifier
        self._runtime = runtime
        """The runtime served from now (a reload swaps it)."""
        self._keep = keep
        self._last_status = 0.0
        self._last_trim = time.monotonic()
        self._trim_due: asyncio.Task[None] | None = None
        """The trim that a request's end has asked for, until it has run."""
        self._unattended = unattended
        """No connection is open and no request in flight (the service's; read on the loop)."""
        self._refreeze = False
        self._look: asyncio.Task[None] | None = None
        """The next look for a moment to freeze in, set by a trim with somebody connected."""

    def ready(self, player: Player | None) -> None:
        """READY=1 and the ready line: the daemon serves."""
        runtime = self._runtime()
        self.notifier.ready(status=status_line(runtime))
        self._settle()
        # The pid: what a SIGHUP goes to (``pidof ttsd`` finds no process: it is python).
        log.info(
            "ready: pid=%d backend=%s voices=%s playback=%s",
            os.getpid(),
            runtime.backend_status.get("backend", "onnx-cpu"),
            ",".join(runtime.voices),
            player.health()["state"] if player is not None else "off",
        )

    def reloaded(self) -> None:
        """READY=1 again after a reload (RELOADING=1 was said before it)."""
        self.notifier.ready(status=status_line(self._runtime()))
        self._settle()

    def start_watchdog(self) -> None:
        interval = watchdog_interval_s()
        if interval is None:
            return
        scheduler = self._runtime().scheduler
        # The worker heartbeat goes stale when an inference call hangs; then the pings
        # stop and systemd restarts us.
        limit = 2.0 * interval

        def alive() -> bool:
            return scheduler.heartbeat_age() < limit

        loop = asyncio.get_running_loop()
        self._keep(loop.create_task(watchdog_loop(self.notifier, interval, alive)))

    def _settle(self) -> None:
        """An owed READY goes out with the next watchdog ping; without a watchdog, a task
        sends it again until it is delivered."""
        if self.notifier.owed and watchdog_interval_s() is None:
            self._keep(asyncio.get_running_loop().create_task(settle_owed(self.notifier)))

    def on_request_done(self, _stream: object = None) -> None:
        now = time.monotonic()
        runtime = self._runtime()
        if self.notifier.enabled and now - self._last_status > STATUS_EVERY_S:
            self._last_status = now
            self.notifier.status(status_line(runtime))
        self.trim_soon()

    def thawed(self) -> None:
        """A reload thawed what start-up froze (:func:`appliance.ops.memory.thaw`): freeze
        again at the first trim with nobody connected, so that collections walk only
        what came after once more."""
        self._refreeze = True
        self.trim_soon()

    def trim_soon(self) -> None:
        """Work has ended that freed heap (a request, the idle warm-up): a trim about
        :data:`TRIM_EVERY_S` after the last, unless one is due already."""
        now = time.monotonic()
        if self._trim_due is None:
            delay = max(0.0, TRIM_EVERY_S - (now - self._last_trim))
            self._trim_due = asyncio.get_running_loop().create_task(self._trim(delay))
            self._keep(self._trim_due)

    async def _trim(self, delay: float) -> None:
        """Hand freed heap back ``delay`` s from now, whether or not requests run then.

        Requests free buffers of every size; what glibc cannot give back from the middle of
        its heap stays resident until ``malloc_trim`` (a few ms, off the loop).  Trimming
        only when no work was queued left a daemon under steady load untrimmed: +10 MB
        free heap over 200 mixed requests from two clients, all of it given back by a
        trim; and the last request of a burst was never followed by one.

        The trim holds each of glibc's arenas while it walks it (7 ms idle, 9–25 ms median
        with two clients on this busy 2-core box), and a thread that allocates meanwhile
        waits; the full collection before it (reference cycles a dropped client left)
        holds the interpreter, ~1 ms with the start-up frozen (18–72 ms before, on that
        box): it waits for real-time work to pause first, batch work is not held up."""
        await asyncio.sleep(delay)
        scheduler, waited = self._runtime().scheduler, 0.0
        while scheduler.realtime_busy() and waited < TRIM_WAIT_S:
            await asyncio.sleep(TRIM_RETRY_S)
            waited += TRIM_RETRY_S
        self._last_trim = time.monotonic()
        self._trim_due = None
        await asyncio.get_running_loop().run_in_executor(None, self._release, self._runtime())
        if self._refreeze:
            self._freeze_again()

    def _freeze_again(self) -> None:
        """On the loop, so that nothing connects between the look and the freeze: a
        connection's objects frozen would stay for good if they died in a cycle.  The
        trim's full collection has just run: only what came since (the young generations,
        ~0.1 ms) is collected before the freeze."""
        if not self._unattended():
            if self._look is None or self._look.done():  # a trim every 10 s: one look
                self._look = asyncio.get_running_loop().create_task(self._look_again())
                self._keep(self._look)
            return
        self._refreeze = False
        frozen = memory.freeze(generation=1)
        log.debug("memory: %d objects frozen again after the reload", frozen)

    async def _look_again(self) -> None:
        await asyncio.sleep(REFREEZE_RETRY_S)
        self.trim_soon()

    @staticmethod
    def _release(runtime: Runtime) -> None:
        """(A worker thread.) The runtime's release; what it gave back, at debug level."""
        if not log.isEnabledFor(logging.DEBUG):
            runtime.release_memory()
            return
        me = psutil.Process()
        before = me.memory_info().rss
        runtime.release_memory()
        log.debug(
            "memory: freed heap handed back: RSS %.1f -> %.1f MB",
            before / 1e6,
            me.memory_info().rss / 1e6,
        )


def status_line(runtime: Runtime) -> str:
    c = runtime.metrics.counters
    served = c["requests_completed"] + c["requests_cancelled"]
    return (
        f"backend={runtime.backend_status.get('backend', 'onnx-cpu')} "
        f"voices={','.join(runtime.voices)} served={served}"
    )
