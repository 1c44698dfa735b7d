"""``ttsd serve``: the daemon as one object with named phases.

- **start** — take SIGINT and SIGTERM first, adopt an activated socket (``LISTEN_FDS``),
  open the speaker in a thread beside the voices (a missing device must not hold up
  ``synthesize``), import the engine, load the voices and warm their first packets in
  another (:meth:`appliance.core.runtime.Runtime.warm_first_packets`), read the lexicon,
  build the service core and start every door (protocol v1 first, then HTTP and Wyoming
  when configured).  A request from here on gets its first packet as quickly as any
  later one; ping, info and health say ``warm`` once ``speak`` is as quick too.
- **serve** — the rest of the warm-up as batch work every request goes ahead of; wait
  for the speaker to run, say ``READY=1``; then serve until SIGTERM or SIGINT.
- **interrupted** — SIGINT or SIGTERM before ``READY=1``: the daemon stops within a
  fraction of a second, whatever start-up step runs (a voice's first cut takes seconds
  and cannot be stopped half-way: its thread is left to the process's exit, see
  :mod:`appliance.main`; the cut's files are written whole or not at all).
- **reload** — SIGHUP: the config and the lexicon are read again in threads of their own
  (a hung file must neither stall the loop nor keep SIGTERM waiting), the live keys
  applied, ``voices_dir`` scanned for voices added or removed (:mod:`appliance.core.voiceset`);
  one reload at a time, a SIGHUP during one asks for one more after it; one during
  start-up (whose default action would end the process) runs once the daemon serves.
- **stop** — SIGTERM first gives notice when a balancer can read it (the HTTP door or
  the agent is on): for ``limits.drain_notice_s`` the box still serves but says ``drain``
  (agent) and 503 (``/healthz``, ``/readyz``), so new work goes elsewhere (a second
  SIGTERM cuts the notice short).  Then every door closes its listener, the core drains
  what is in flight up to ``limits.shutdown_timeout_s`` and ends the rest with
  ``shutting_down``: a request that got ``start`` gets its end or that error.
- **close** — the doors (their connections, socket files), the core, the voices.

State lives in attributes; tests reach in only through :class:`Seams`, passed in by the
program that builds the daemon (``tests/fakes/daemon.py``), never through the environment.
The engine (ONNX Runtime and the core) is imported in the loading thread, not here: the
speaker opens while it is, and a signal is answered meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from appliance.ops import memory
from appliance.ops.activation import ActivationError, activated_unix_listener, listen_fds
from appliance.ops.config import Config, Flags
from appliance.ops.notify import Notifier, settle_owed, watchdog_interval_s, watchdog_loop
from appliance.ops.offloop import FileReads, in_thread
from appliance.reload import Reloader, Reloads, read_lexicon
from appliance.text.lexicon import LexiconError

if TYPE_CHECKING:
    from appliance.core.runtime import Runtime
    from appliance.core.service import Service
    from appliance.doors.frame.door import Door
    from appliance.playback import Player

log = logging.getLogger("ttsd")
_T = TypeVar("_T")

INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 0}
"""Exit status of a start-up stopped by a signal: Ctrl-C's 130 (128 + SIGINT, what a
shell expects), and SIGTERM's 0 (a stop asked for, as it is once serving)."""


@dataclass
class Seams:
    """What a test puts into the daemon it runs; a real daemon has none.  Each is called
    once, with the object as start built it, before any door listens."""

    runtime: Callable[[Runtime], None] | None = None
    service: Callable[[Service], None] | None = None


class Daemon:
    """One ``ttsd serve``: :meth:`run` is start, serve, stop and close (see the module)."""

    def __init__(
        self,
        cfg: Config,
        config_path: str | None,
        socket_path: Path,
        seams: Seams | None = None,
        flags: Flags | None = None,
    ) -> None:
        self._config = cfg
        self.config_path = config_path
        self.flags: Flags = dict(flags or {})
        """The command line's settings: laid over the file again on every reload."""
        self.socket_path = socket_path
        self.seams = seams or Seams()
        self.notifier = Notifier.from_env()
        self.runtime: Runtime | None = None
        self.service: Service | None = None
        self.player: Player | None = None
        self.doors: list[Door] = []
        self.tasks: set[asyncio.Task[Any]] = set()
        self.file_reads = FileReads()
        self.reloads = Reloads()
        self._stop = asyncio.Event()
        self._notice: asyncio.TimerHandle | None = None
        self._player_started: asyncio.Future[None] | None = None
        self.ready = False
        """READY=1 was said: a signal from here on stops gracefully (drains)."""
        self.interrupted: signal.Signals | None = None
        """The signal that stopped the start-up; start-up threads may still run."""
        self._last_status = 0.0
        self._hup_pending = False
        """A SIGHUP came before the daemon served: a reload runs once it does."""
        self._last_trim = time.monotonic()

    @property
    def cfg(self) -> Config:
        """The one config (the file with the flags over it): the runtime's once it is
        loaded, where reloads put their live changes and every door reads it."""
        return self.runtime.config if self.runtime is not None else self._config

    # ------------------------------------------------------------ the whole life

    async def run(self) -> int:
        """The daemon's life; its exit status."""
        try:
            started = await self.start()
            if started:
                await self.serve()
            if self.interrupted is not None:
                await self._end_interrupted()
                return INTERRUPTED[self.interrupted]
            if not started:
                return 1
            await self.stop()
            return 0
        finally:
            await self.close()

    # ------------------------------------------------------------ start

    async def start(self) -> bool:
        """Everything before serving; False (said in one line) when the daemon cannot or
        a signal stopped it (``interrupted``)."""
        self._install_signals()
        try:
            activated = activated_unix_listener(listen_fds())
        except ActivationError as exc:
            log.error("socket activation: %s", exc)
            return False
        self._start_player()
        if not await self._load_runtime() or not await self._load_lexicon():
            return False
        assert self.runtime is not None
        from appliance.core.service import Service  # imported by the loading thread

        self.service = Service(self.runtime)
        self.service.hold_speech()  # until the speaker runs
        if self.seams.runtime is not None:
            self.seams.runtime(self.runtime)
        if self.seams.service is not None:
            self.seams.service(self.service)
        self.doors = self._doors(activated)
        if not await self._start_doors():
            return False
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload)
        if self._hup_pending:
            log.info("reload: the SIGHUP that came during start-up")
            self.reload()
        self._start_watchdog()
        self.service.on_request_done.append(self._on_request_done)
        return True

    def _start_player(self) -> None:
        """The speaker, opened in a thread beside the voices (``starting`` until it runs):
        probing a device that is not there took 2.1 s of a 2.4–4.1 s start."""
        if not self.cfg.playback.enabled:
            return
        from appliance.playback import Player

        # Opened once and kept running, so no device opening stands between a request and
        # its first sound.  Never raises: no device means "off" with a warning.
        self.player = Player(self.cfg.playback)
        self.player.starting()
        self._player_started = in_thread(self.player.start, "ttsd-open-speaker")

    async def _load_runtime(self) -> bool:
        # Importing the engine, loading the voices and warming their first packets is
        # slow I/O and inference: off the loop, in a thread a signal need not wait for.
        load = in_thread(functools.partial(_load_warm, self.cfg, self.notifier), "ttsd-load")
        runtime = await self._until_stopped(load)
        if runtime is None:
            return False
        if isinstance(runtime, str):
            log.error("cannot start: %s", runtime)
            return False
        self.runtime = runtime
        self.runtime.player = self.player
        return True

    async def _load_lexicon(self) -> bool:
        if not self.cfg.voices.lexicon:
            return True
        runtime = self.runtime
        assert runtime is not None
        try:
            reading = read_lexicon(self.file_reads, runtime, self.cfg)
            lexicon = await self._until_stopped(asyncio.ensure_future(reading))
        except LexiconError as exc:
            log.error("lexicon: %s", exc)
            return False
        if self._stop.is_set():
            return False
        runtime.lexicon = lexicon
        return True

    def _doors(self, activated: socket.socket | None) -> list[Door]:
        """Protocol v1, then the doors the config turns on (each on the same core)."""
        from appliance.doors.v1.server import V1Door

        assert self.service is not None
        doors: list[Door] = [V1Door(self.service, self.socket_path, activated)]
        if self.cfg.http.listen:
            from appliance.doors.http import HttpDoor

            doors.append(HttpDoor(self.service, self.cfg.http))
        if self.cfg.wyoming.uri:
            from appliance.doors.wyoming import WyomingDoor

            for line in wyoming_warnings(self.cfg):
                log.warning("%s", line)
            doors.append(WyomingDoor(self.service, self.cfg.wyoming.uri))
        if self.cfg.agent.listen:
            from appliance.doors.agent import AgentDoor

            doors.append(AgentDoor(self.service, self.cfg.agent))
        return doors

    async def _start_doors(self) -> bool:
        try:
            for door in self.doors:
                await door.start()
        except (OSError, ValueError) as exc:
            log.error("cannot listen: %s", exc)
            return False
        return True

    def _install_signals(self) -> None:
        """First thing at start: a signal during start-up stops it at once (see the
        module), one once serving drains (:meth:`request_stop`)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop_signal, sig)
        # SIGHUP's default action ends the process: one during start-up (a `systemctl
        # reload` while the voices load) is kept, and run once the daemon serves.
        loop.add_signal_handler(signal.SIGHUP, self._hup_during_start)

    def _hup_during_start(self) -> None:
        self._hup_pending = True

    def _on_stop_signal(self, sig: signal.Signals) -> None:
        if self.ready:
            self.request_stop()
        elif not self._stop.is_set():
            self.interrupted = sig
            self.stop_now()

    async def _end_interrupted(self) -> None:
        """Requests admitted before READY=1 (``synthesize`` is served while the speaker
        starts) end with ``shutting_down`` rather than with the process."""
        if self.service is None or not self.service.streams:
            return
        await self.service.shutdown(0.0)
        deadline = time.monotonic() + 0.2
        idle = asyncio.gather(*(door.wait_idle(deadline) for door in self.doors))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(idle, 0.2)

    def _start_watchdog(self) -> None:
        interval = watchdog_interval_s()
        if interval is None:
            return
        runtime = self.runtime
        assert runtime is not None
        # The worker heartbeat goes stale when an inference call hangs; then the pings
        # stop and systemd restarts us.
        limit = 2.0 * interval

        def alive() -> bool:
            return runtime.scheduler.heartbeat_age() < limit

        self._keep(
            asyncio.get_running_loop().create_task(watchdog_loop(self.notifier, interval, alive))
        )

    def _settle_notices(self) -> None:
        """An owed READY (the manager's queue was full) goes out with the next watchdog
        ping; without a watchdog, a task sends it again until it is delivered."""
        if self.notifier.owed and watchdog_interval_s() is None:
            self._keep(asyncio.get_running_loop().create_task(settle_owed(self.notifier)))

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _on_request_done(self) -> None:
        now = time.monotonic()
        runtime = self.runtime
        assert runtime is not None
        if self.notifier.enabled and now - self._last_status > 2.0:
            self._last_status = now
            self.notifier.status(status_line(runtime))
        if now - self._last_trim > 10.0 and runtime.scheduler.depth() == 0:
            # Quiet moment: hand freed heap back so RSS stays flat over long runs.
            self._last_trim = now
            asyncio.get_running_loop().run_in_executor(None, memory.trim)

    # ------------------------------------------------------------ serve

    async def serve(self) -> None:
        """The rest of the warm-up in the background; wait for the speaker, READY=1; then
        until stopped."""
        runtime, service = self.runtime, self.service
        assert runtime is not None and service is not None
        self._keep(asyncio.get_running_loop().create_task(self._warm_rest()))
        # READY=1 and "warm" wait for the speaker to run (or to be found missing), so a
        # speak after them is as quick as any other.
        await self._until_stopped(self._player_started)
        if self.player is not None and not self._stop.is_set():
            await self._until_stopped(in_thread(self._speaker_running, "ttsd-speaker-wait"))
        if not self._stop.is_set():
            service.release_speech()
            self.ready = True
            self.notifier.ready(status=status_line(runtime))
            self._settle_notices()
            # The pid: what a SIGHUP goes to (``pidof ttsd`` finds no process: it is python).
            log.info(
                "ready: pid=%d backend=%s voices=%s playback=%s",
                os.getpid(),
                runtime.backend_status.get("backend", "onnx-cpu"),
                ",".join(runtime.voices),
                self.player.health()["state"] if self.player is not None else "off",
            )
        await self._stop.wait()

    def _speaker_running(self) -> None:
        """Once the start-up's own work is done: the stream runs now (Player.wait_running)."""
        player = self.player
        if player is not None and player.health()["state"] == "ok" and not player.wait_running():
            log.warning("playback: the output stream is not running steadily yet")

    async def _warm_rest(self) -> None:
        """The rest of the warm-up while no request is in flight (appliance.core.warmup);
        its cost per audio second replaces admission's start-up estimate when no request
        ran beside it (their CPU time would count).  ``health.warm_up`` says ``done``."""
        from appliance.core.warmup import IdleWarmUp

        runtime, service = self.runtime, self.service
        assert runtime is not None and service is not None
        voices = list(runtime.voices.values())
        cost = await IdleWarmUp(voices, runtime.scheduler, lambda: bool(service.streams)).run()
        runtime.warm_up_done = True
        if cost is not None:
            runtime.stream_cost = cost
            service.admission.measured_at_start(cost)

    async def _until_stopped(self, work: asyncio.Future[_T] | None) -> _T | None:
        """``work``'s result (its exception raised), or None when a stop was asked for
        first (``work`` is then left to run: a thread cannot be stopped)."""
        if work is None:
            return None
        stopping: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if work.done():
            return work.result()
        return None

    # ------------------------------------------------------------ stop

    def request_stop(self) -> None:
        """SIGTERM, SIGINT: the drain notice first when a balancer can read it, then
        :meth:`stop_now`; a second signal during the notice stops at once."""
        if self._stop.is_set():
            return
        notice = self._drain_notice_s()
        if notice > 0 and self.service is not None and self._notice is None:
            self.notifier.stopping()
            self.service.draining = True
            log.info("draining: telling load balancers for %.1f s before stopping", notice)
            self._notice = asyncio.get_running_loop().call_later(notice, self.stop_now)
            return
        self.stop_now()

    def _drain_notice_s(self) -> float:
        """The notice applies only where a balancer reads this box: HTTP or the agent."""
        cfg = self.cfg
        if not (cfg.http.listen or cfg.agent.listen):
            return 0.0
        return cfg.limits.drain_notice_s

    def stop_now(self) -> None:
        """Every door stops taking connections at once; :meth:`stop` drains what is in
        flight."""
        if self._notice is not None:
            self._notice.cancel()
        self.notifier.stopping()
        for t in list(self.tasks):
            t.cancel()
        for door in self.doors:
            door.close_listener()
        self._stop.set()

    async def stop(self) -> None:
        """Let the core drain what is in flight, whatever door it came through, up to
        ``limits.shutdown_timeout_s``; the rest ends with ``shutting_down``."""
        for door in self.doors:
            door.close_listener()
        if self.service is not None and self.runtime is not None:
            log.info("shutting down")
            timeout = self.runtime.config.limits.shutdown_timeout_s
            deadline = asyncio.get_running_loop().time() + timeout
            await self.service.shutdown(timeout)
            # What the core made and a door still sends (paced frames) goes out up to the
            # same deadline; each door then ends the rest with shutting_down.
            await asyncio.gather(*(door.wait_idle(deadline) for door in self.doors))
            log.info("shutdown complete")

    async def close(self) -> None:
        """Whatever start made, closed (also after a start that failed part-way: a
        socket bound before a later door failed is not left behind).  After an
        interrupted start, the doors and the notifier only: the start-up's threads
        (a cut, a device probe) cannot be stopped, and the program exits without them."""
        for door in self.doors:
            await door.close()
        for t in list(self.tasks):
            t.cancel()
        if self.interrupted is not None:
            self.notifier.close()
            return
        if self.service is not None:
            self.service.close()
        if self.runtime is not None:
            self.runtime.close()
        elif self.player is not None:
            self.player.close()
        self.notifier.close()

    # ------------------------------------------------------------ reload

    def reload(self) -> None:
        """SIGHUP (see the module and :mod:`appliance.reload`)."""
        task = self.reloads.request(self._reload_once)
        if task is None:
            log.info("reload: already reloading; the file is read again after this one")
            return
        self._keep(task)

    async def _reload_once(self) -> None:
        assert self.runtime is not None
        self.notifier.reloading()
        try:
            await Reloader(self.runtime, self.config_path, self.flags, self.file_reads).reload()
        except Exception as exc:  # a bug: one line, and the next SIGHUP still works
            log.error("reload failed, keeping the old settings: %s", exc)
            log.debug("reload failure", exc_info=True)
        finally:
            self.notifier.ready(status=status_line(self.runtime))
            self._settle_notices()


def wyoming_warnings(cfg: Config) -> list[str]:
    """What the Wyoming settings leave out that was likely meant: a listener other hosts
    can reach while only loopback peers are admitted (``wyoming.allowed_networks``' default),
    and v1's peer settings, which a ``unix://`` socket no longer borrows."""
    from appliance.doors.net import is_loopback, is_loopback_network
    from appliance.ops.config import V1Config, WyomingConfig, wyoming_endpoint

    w = cfg.wyoming
    if not w.uri:
        return []
    kind, host, _port = wyoming_endpoint(w.uri)
    if kind == "tcp":
        if is_loopback(host) or not all(is_loopback_network(n) for n in w.allowed_networks):
            return []
        return [
            f"wyoming: {w.uri} is open to other hosts, but wyoming.allowed_networks"
            f" ({', '.join(w.allowed_networks)}) admits only this host: Home Assistant on"
            " another host is refused; name its network there or with --wyoming-allow NETWORK"
        ]
    peers = ("socket_mode", "allowed_uids", "allowed_gids")
    own, v1 = WyomingConfig(), V1Config()
    if all(getattr(w, k) == getattr(own, k) for k in peers) and any(
        getattr(cfg.v1, k) != getattr(v1, k) for k in peers
    ):
        return [
            "wyoming: the unix socket's mode and peers are wyoming.socket_mode,"
            " wyoming.allowed_uids and wyoming.allowed_gids (v1's settings no longer apply)"
        ]
    return []


def status_line(runtime: Runtime) -> str:
    c = runtime.metrics.counters
    served = c["requests_completed"] + c["requests_cancelled"]
    return (
        f"backend={runtime.backend_status.get('backend', 'onnx-cpu')} "
        f"voices={','.join(runtime.voices)} served={served}"
    )


def _load_warm(cfg: Config, notifier: Notifier) -> Runtime | str:
    """In the loading thread: the engine imported, the voices loaded, their first packets
    warm and the workers started; a one-line reason when the daemon cannot start."""
    from appliance.core.runtime import Runtime, StartError

    try:
        runtime = Runtime.load(cfg, notifier, warm=False)
    except StartError as exc:
        return str(exc)
    runtime.warm_first_packets()
    runtime.scheduler.start()
    # Cutting a voice on first start leaves ~200 MB of freed heap behind: give it back.
    memory.trim()
    return runtime
