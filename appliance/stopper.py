"""The daemon's signals and its stop: SIGINT and SIGTERM from the first moment, SIGHUP
once it serves.

- **start-up** — a stop signal interrupts the start at once (:attr:`Stopper.interrupted`
  says which: the exit status); a SIGHUP (whose default action would end the process) is
  kept and runs once the daemon serves (:meth:`Stopper.serving`).
- **serving** — SIGHUP reloads; a stop signal first gives the drain notice when
  ``notice_s`` says one applies (a balancer reads this box), then stops; a second one
  during the notice stops at once.
- **stop** — :meth:`Stopper.stop_now`: the daemon's own part (``halt``: its doors stop
  taking connections, its tasks end), then :attr:`Stopper.stopped` is set.

"Draining" here is the notice only (the core's ``draining``); what follows is the stop.
Bounds: one notice timer; :meth:`Stopper.until_stopped` never waits on a thread past a
stop (a thread cannot be stopped: it is left to the process's exit).  Lifecycle: one per
daemon, made before anything starts.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any, TypeVar

from appliance.ops.config import Config
from appliance.ops.notify import Notifier

log = logging.getLogger("ttsd")
_T = TypeVar("_T")

INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 0}
"""Exit status of a start-up stopped by a signal: Ctrl-C's 130 (128 + SIGINT, what a
shell expects), and SIGTERM's 0 (a stop asked for, as it is once serving)."""


class Stopper:
    """The daemon's signal handlers and stop (see the module)."""

    def __init__(
        self,
        notifier: Notifier,
        halt: Callable[[], None],
        notice_s: Callable[[], float],
        give_notice: Callable[[], None],
    ) -> None:
        self.notifier = notifier
        self._halt = halt
        self._notice_s = notice_s
        """How long the drain notice lasts now (0: none applies)."""
        self._give_notice = give_notice
        self.stopped = asyncio.Event()
        self.ready = False
        """READY=1 was said: a signal from here on stops gracefully (the notice, the stop)."""
        self.interrupted: signal.Signals | None = None
        """The signal that stopped the start-up; start-up threads may still run."""
        self._notice: asyncio.TimerHandle | None = None
        self._hup_pending = False
        """A SIGHUP came before the daemon served: a reload runs once it does."""

    def install(self) -> None:
        """First thing at start: a signal during start-up stops it at once, one once
        serving gives notice and stops (:meth:`request_stop`)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop_signal, sig)
        # SIGHUP's default action ends the process: one during start-up (a `systemctl
        # reload` while the voices load) is kept, and run once the daemon serves.
        loop.add_signal_handler(signal.SIGHUP, self._hup_during_start)

    def serving(self, reload: Callable[[], None]) -> None:
        """SIGHUP reloads from now on; one that came during start-up reloads now."""
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)
        if self._hup_pending:
            log.info("reload: the SIGHUP that came during start-up")
            reload()

    def _hup_during_start(self) -> None:
        self._hup_pending = True

    def _on_stop_signal(self, sig: signal.Signals) -> None:
        if self.ready:
            self.request_stop()
        elif not self.stopped.is_set():
            self.interrupted = sig
            self.stop_now()

    def request_stop(self) -> None:
        """SIGTERM, SIGINT: the drain notice first when a balancer can read it, then
        :meth:`stop_now`; a second signal during the notice stops at once."""
        if self.stopped.is_set():
            return
        notice = self._notice_s()
        if notice > 0 and self._notice is None:
            self.notifier.stopping()
            self._give_notice()
            log.info("draining: telling load balancers for %.1f s before stopping", notice)
            self._notice = asyncio.get_running_loop().call_later(notice, self.stop_now)
            return
        self.stop_now()

    def stop_now(self) -> None:
        """The stop begins: the daemon's doors stop taking connections at once (``halt``);
        the daemon then lets what is in flight finish."""
        if self._notice is not None:
            self._notice.cancel()
        self.notifier.stopping()
        self._halt()
        self.stopped.set()

    async def until_stopped(self, work: asyncio.Future[_T] | None) -> _T | None:
        """``work``'s result (its exception raised), or None when a stop was asked for
        first (``work`` is then left to run: a thread cannot be stopped)."""
        if work is None:
            return None
        stopping: asyncio.Future[Any] = asyncio.ensure_future(self.stopped.wait())
        try:
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if work.done():
            return work.result()
        return None


def drain_notice_s(cfg: Config) -> float:
    """The notice applies only where a balancer reads this box: HTTP or the agent."""
    if not (cfg.http.listen or cfg.agent.listen):
        return 0.0
    return cfg.limits.drain_notice_s
