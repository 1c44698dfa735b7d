"""``ttsd serve``: the daemon as one object with named phases.

- **start** — take SIGINT and SIGTERM first, adopt an activated socket (``LISTEN_FDS``),
  open the speaker in a thread beside the voices (a missing device must not hold up
  ``synthesize``), import the engine, load the voices and warm their first packets in
  another (:meth:`appliance.core.runtime.Runtime.warm_first_packets`), freeze what that
  made (:func:`appliance.ops.memory.freeze`), read the lexicon, build the service core
  and start every door (protocol v1 first, then HTTP and Wyoming when configured).  A
  request from here on gets its first packet as quickly as any later one; ping, info
  and health say ``warm`` once ``speak`` is as quick too.
- **serve** — the rest of the warm-up as batch work every request goes ahead of; wait
  for the speaker to run, say ``READY=1``; then serve until SIGTERM or SIGINT.
- **interrupted** — SIGINT or SIGTERM before ``READY=1``: the daemon stops within a
  fraction of a second, whatever start-up step runs (a voice's first cut takes seconds
  and cannot be stopped half-way: its thread is left to the process's exit, see
  :mod:`appliance.main`; the cut's files are written whole or not at all).
- **reload** — SIGHUP: the config and the lexicon are read again in threads of their own
  (a hung file must neither stall the loop nor keep SIGTERM waiting), the live keys
  applied, ``voices_dir`` scanned for voices added or removed (:mod:`appliance.core.voiceset`),
  the CPU quota read again (also every 10 s while serving: :mod:`appliance.quotawatch`);
  what start-up froze is thawed first (:func:`appliance.ops.memory.freeze`) and frozen
  again at the first trim that finds nobody connected (:mod:`appliance.upkeep`);
  one reload at a time, a SIGHUP during one asks for one more after it; one during
  start-up (whose default action would end the process) runs once the daemon serves.
- **stop** — SIGTERM first gives notice when a balancer can read it (the HTTP door or
  the agent is on): for ``limits.drain_notice_s`` the box still serves but says ``drain``
  (agent) and 503 (``/healthz``, ``/readyz``), so new work goes elsewhere (a second
  SIGTERM cuts the notice short).  Then every door closes its listener, the core lets
  what is in flight finish up to ``limits.shutdown_timeout_s`` and ends the rest with
  ``shutting_down``: a request that got ``start`` gets its end or that error.  ("Draining"
  is the notice, the core's ``draining``; what follows it is the stop, ``stopping``.)
- **close** — the doors (their connections, socket files), the core, the voices.

The signals and the stop are :class:`appliance.stopper.Stopper`'s, the doors
:class:`appliance.doors.doorset.DoorSet`'s, what systemd is told
:class:`appliance.upkeep.Upkeep`'s; the runtime is the service's (a reload swaps it).
State lives in attributes; tests reach in only through :class:`Seams`, passed in by the
program that builds the daemon (``tests/fakes/daemon.py``), never through the environment.
The engine (ONNX Runtime and the core) is imported in the loading thread, not here: the
speaker opens while it is, and a signal is answered meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.keepwarm import KeepWarm
from appliance.ops import memory
from appliance.ops.activation import ActivationError, activated_unix_listener, listen_fds
from appliance.ops.config import Config, Flags
from appliance.ops.notify import Notifier
from appliance.ops.offloop import FileReads, in_thread
from appliance.quotawatch import QuotaWatch
from appliance.reload import Reloader, Reloads, read_lexicon
from appliance.stopper import INTERRUPTED, Stopper, drain_notice_s
from appliance.text.lexicon import LexiconError
from appliance.upkeep import Upkeep

if TYPE_CHECKING:
    import signal

    from appliance.core.runtime import Runtime
    from appliance.core.service import Service
    from appliance.doors.doorset import DoorSet
    from appliance.playback import Player

log = logging.getLogger("ttsd")

__all__ = ["INTERRUPTED", "Daemon", "Seams"]


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
        self._runtime: Runtime | None = None
        """The runtime as start loads it, until the service serves from it."""
        self.service: Service | None = None
        self.player: Player | None = None
        self.doors: DoorSet | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.file_reads = FileReads()
        self.reloads = Reloads()
        self.stopper = Stopper(self.notifier, self._halt, self._notice_s, self._give_notice)
        self.upkeep = Upkeep(self.notifier, self._serving_runtime, self._keep, self._unattended)
        self.quota_watch = QuotaWatch(self._service, self._keep)
        self.keep_warm = KeepWarm(self._service, self._keep)
        self._player_started: asyncio.Future[None] | None = None

    @property
    def runtime(self) -> Runtime | None:
        """The runtime served from now: the service's once it is built (a reload swaps
        it), before that the one start is loading."""
        return self.service.runtime if self.service is not None else self._runtime

    @property
    def cfg(self) -> Config:
        """The one config (the file with the flags over it): the runtime's once it is
        loaded, where reloads put their live changes and every door reads it."""
        runtime = self.runtime
        return runtime.config if runtime is not None else self._config

    @property
    def interrupted(self) -> signal.Signals | None:
        """The signal that stopped the start-up (:attr:`Stopper.interrupted`)."""
        return self.stopper.interrupted

    def _serving_runtime(self) -> Runtime:
        assert self.runtime is not None
        return self.runtime

    def _unattended(self) -> bool:
        """No connection open on any door and no request in flight."""
        s = self.service
        return s is not None and not s.streams and not any(s.registry.connections().values())

    def _service(self) -> Service:
        assert self.service is not None
        return self.service

    # ------------------------------------------------------------ the whole life

    async def run(self) -> int:
        """The daemon's life; its exit status."""
        try:
            started = await self.start()
            if started:
                await self.serve()
            if self.stopper.interrupted is not None:
                await self._end_interrupted()
                return INTERRUPTED[self.stopper.interrupted]
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
        self.stopper.install()
        try:
            activated = activated_unix_listener(listen_fds())
        except ActivationError as exc:
            log.error("socket activation: %s", exc)
            return False
        self._start_player()
        if not await self._load_runtime() or not await self._load_lexicon():
            return False
        assert self._runtime is not None
        # Imported by the loading thread (the engine and the core, see the module).
        from appliance.core.service import Service
        from appliance.doors.doorset import DoorSet

        self.service = Service(self._runtime)
        self.service.hold_speech()  # until the speaker runs
        if self.seams.runtime is not None:
            self.seams.runtime(self._runtime)
        if self.seams.service is not None:
            self.seams.service(self.service)
        self.doors = DoorSet.from_config(self.service, self.cfg, self.socket_path, activated)
        if not await self.doors.start():
            return False
        self.stopper.serving(self.reload)
        self.upkeep.start_watchdog()
        self.service.on_request_done.append(self.upkeep.on_request_done)
        self.service.on_request_done.append(self.keep_warm.on_request_done)
        self.quota_watch.start()
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
        runtime = await self.stopper.until_stopped(load)
        if runtime is None:
            return False
        if isinstance(runtime, str):
            log.error("cannot start: %s", runtime)
            return False
        self._runtime = dataclasses.replace(runtime, player=self.player)
        self._runtime.metrics.collections.install()
        return True

    async def _load_lexicon(self) -> bool:
        runtime = self._runtime
        assert runtime is not None
        if not self.cfg.voices.lexicon:
            return True
        try:
            reading = read_lexicon(self.file_reads, runtime, self.cfg)
            lexicon = await self.stopper.until_stopped(asyncio.ensure_future(reading))
        except LexiconError as exc:
            log.error("lexicon: %s", exc)
            return False
        if self.stopper.stopped.is_set():
            return False
        self._runtime = dataclasses.replace(runtime, lexicon=lexicon)
        return True

    async def _end_interrupted(self) -> None:
        """Requests admitted before READY=1 (``synthesize`` is served while the speaker
        starts) end with ``shutting_down`` rather than with the process."""
        if self.service is None or not self.service.streams:
            return
        await self.service.shutdown(0.0)
        if self.doors is not None:
            idle = self.doors.wait_idle(time.monotonic() + 0.2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(idle, 0.2)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------ serve

    async def serve(self) -> None:
        """The rest of the warm-up in the background; wait for the speaker, READY=1; then
        until stopped."""
        service, stopped = self.service, self.stopper.stopped
        assert service is not None
        self._keep(asyncio.get_running_loop().create_task(self._warm_rest()))
        # READY=1 and "warm" wait for the speaker to run (or to be found missing), so a
        # speak after them is as quick as any other.
        await self.stopper.until_stopped(self._player_started)
        if self.player is not None and not stopped.is_set():
            running = in_thread(self._speaker_running, "ttsd-speaker-wait")
            await self.stopper.until_stopped(running)
        if not stopped.is_set():
            service.release_speech()
            self.stopper.ready = True
            self.upkeep.ready(self.player)
        await stopped.wait()

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
        runtime.warm.finished(cost)
        if cost is not None:
            service.admission.measured_at_start(cost)
        # Its runs freed ~10 MB of heap that an idle daemon kept until its first request.
        self.upkeep.trim_soon()

    # ------------------------------------------------------------ stop

    def _notice_s(self) -> float:
        return drain_notice_s(self.cfg) if self.service is not None else 0.0

    def _give_notice(self) -> None:
        assert self.service is not None
        self.service.draining = True

    def _halt(self) -> None:
        """The stop begins: the daemon's tasks end and no door takes a connection."""
        for t in list(self.tasks):
            t.cancel()
        if self.doors is not None:
            self.doors.close_listeners()

    async def stop(self) -> None:
        """Let the core finish what is in flight, whatever door it came through, up to
        ``limits.shutdown_timeout_s``; the rest ends with ``shutting_down``."""
        if self.doors is not None:
            self.doors.close_listeners()
        if self.service is not None and self.doors is not None:
            log.info("shutting down")
            timeout = self.service.runtime.config.limits.shutdown_timeout_s
            deadline = asyncio.get_running_loop().time() + timeout
            await self.service.shutdown(timeout)
            # What the core made and a door still sends (paced frames) goes out up to the
            # same deadline; each door then ends the rest with shutting_down.
            await self.doors.wait_idle(deadline)
            log.info("shutdown complete")

    async def close(self) -> None:
        """Whatever start made, closed (also after a start that failed part-way: a
        socket bound before a later door failed is not left behind).  After an
        interrupted start, the doors and the notifier only: the start-up's threads
        (a cut, a device probe) cannot be stopped, and the program exits without them."""
        if self.doors is not None:
            await self.doors.close()
        for t in list(self.tasks):
            t.cancel()
        memory.thaw()  # for a caller that goes on in this process (tests)
        if self.runtime is not None:
            self.runtime.metrics.collections.remove()
        if self.stopper.interrupted is not None:
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
        assert self.service is not None
        self.notifier.reloading()
        # What a reload replaces (a voice removed, the old runtime) may sit in reference
        # cycles: frozen, it would never be freed.  Frozen again once nobody is connected.
        memory.thaw()
        try:
            await Reloader(self.service, self.config_path, self.flags, self.file_reads).reload()
            await self.quota_watch.check()
        except Exception as exc:  # a bug: one line, and the next SIGHUP still works
            log.error("reload failed, keeping the old settings: %s", exc)
            log.debug("reload failure", exc_info=True)
        finally:
            self.upkeep.reloaded()
            self.upkeep.thawed()


def _load_warm(cfg: Config, notifier: Notifier) -> Runtime | str:
    """In the loading thread: the engine imported, the voices loaded, their first packets
    warm and the workers started; a one-line reason when the daemon cannot start."""
    from appliance.core.runtime import Runtime, StartError

    try:
        runtime = Runtime.load(cfg, notifier, warm=False)
    except StartError as exc:
        return str(exc)
    # The doors' modules are imported here while the first packets warm in threads of
    # their own (model runs, which leave the interpreter free), not on the loop after.
    with ThreadPoolExecutor(1, "ttsd-warm") as pool:
        warming = pool.submit(runtime.warm_first_packets)
        from appliance.doors.doorset import import_doors

        import_doors(cfg)
        warming.result()
    runtime.scheduler.start()
    # What start-up made lives as long as the process: frozen, no collection walks it
    # again (a full one walked ~50 000 objects, up to 72 ms holding every thread).
    memory.freeze()
    # Cutting a voice on first start leaves ~200 MB of freed heap behind: give it back.
    memory.trim()
    return runtime
