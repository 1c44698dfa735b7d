"""``ttsd``: the daemon and its admin commands (serve, prepare, tune, check-config)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from appliance import __version__, memory
from appliance.config import LIVE_KEYS, Config, ConfigError, flatten, load_config

if TYPE_CHECKING:
    from appliance.lexicon import Lexicon
    from appliance.playback import Player
    from appliance.runtime import Runtime
    from appliance.service import Door, Service

log = logging.getLogger("ttsd")
_T = TypeVar("_T")


def _configure_logging(level: str) -> None:
    from appliance.logsetup import configure_logging

    configure_logging(level)


def _status_line(runtime: Runtime) -> str:
    c = runtime.metrics.counters
    served = c["requests_completed"] + c["requests_cancelled"]
    return (
        f"backend={runtime.backend_status.get('backend', 'onnx-cpu')} "
        f"voices={','.join(runtime.voices)} served={served}"
    )


async def _serve(cfg: Config, config_path: str | None, socket_path: Path) -> int:
    from appliance.activation import ActivationError, activated_unix_listener, listen_fds
    from appliance.lexicon import LexiconError
    from appliance.logsetup import set_level
    from appliance.notify import Notifier, watchdog_interval_s, watchdog_loop
    from appliance.runtime import Runtime, StartError
    from appliance.server import Server

    loop = asyncio.get_running_loop()
    notifier = Notifier.from_env()
    try:
        activated = activated_unix_listener(listen_fds())
    except ActivationError as exc:
        log.error("socket activation: %s", exc)
        return 1
    # The speaker is opened beside the voices, not before them: probing a device that is
    # not there took 2.1 s of a 2.4-4.1 s start, and synthesize never needs it.
    player, player_started = _start_player(cfg, loop)
    # Loading voices is slow I/O and inference: keep it off the event loop.  Warming them
    # up comes after the socket listens (below).
    load = functools.partial(Runtime.load, cfg, notifier, warm=False)
    try:
        runtime = await loop.run_in_executor(None, load)
    except BaseException as exc:
        if player is not None:
            player.close()
        if isinstance(exc, StartError):
            log.error("cannot start: %s", exc)
            return 1
        raise
    runtime.player = player
    file_reads = _FileReads()
    if cfg.voices.lexicon:
        try:
            runtime.lexicon = await file_reads.run(
                functools.partial(_load_lexicon, cfg, runtime),
                cfg.voices.lexicon,
                cfg.voices.lexicon_timeout_s,
            )
        except LexiconError as exc:
            log.error("lexicon: %s", exc)
            runtime.close()
            return 1
    from appliance.service import Service

    service = Service(runtime)
    service.hold_requests()  # until the voices are warm
    server = Server(service, socket_path, activated)
    doors = _front_ends(cfg, service)
    try:
        await server.start()
        for door in doors:
            await door.start()
    except (OSError, ValueError) as exc:
        log.error("cannot listen: %s", exc)
        for door in doors:
            await door.close()
        server.close_listener()
        server.remove_socket()  # bound before a later door failed: leave nothing behind
        service.close()
        runtime.close()
        return 1
    state = {"cfg": cfg}

    stall = float(os.environ.get("TTSD_TEST_STALL_WORKER", "0") or 0)
    if stall > 0:
        _inject_stall(runtime, stall)

    tasks: set[asyncio.Task[None]] = set()
    interval = watchdog_interval_s()
    if interval is not None:
        # The worker heartbeat goes stale when an inference call hangs; then the
        # pings stop and systemd restarts us.
        limit = 2.0 * interval
        wd = loop.create_task(
            watchdog_loop(notifier, interval, lambda: runtime.scheduler.heartbeat_age() < limit)
        )
        tasks.add(wd)
        wd.add_done_callback(tasks.discard)

    last_status = [0.0]
    last_trim = [time.monotonic()]

    def on_request_done() -> None:
        now = time.monotonic()
        if notifier.enabled and now - last_status[0] > 2.0:
            last_status[0] = now
            notifier.status(_status_line(runtime))
        if now - last_trim[0] > 10.0 and runtime.scheduler.depth() == 0:
            # Quiet moment: hand freed heap back so RSS stays flat over long runs.
            last_trim[0] = now
            loop.run_in_executor(None, memory.trim)

    service.on_request_done.append(on_request_done)

    stop_requested = asyncio.Event()

    def stop() -> None:
        stop_requested.set()
        notifier.stopping()
        for t in list(tasks):
            t.cancel()
        # Every door stops taking requests first; then the core drains what is in flight
        # (server.shutdown), whatever door it came through.
        for door in doors:
            door.close_listener()
        server.request_stop()

    # SIGHUP: the file is read and parsed in an executor (a large or hostile file must not
    # stall the loop past WatchdogSec), then applied on the loop.  One reload at a time;
    # a SIGHUP during one asks for another after it, since the file may have changed
    # after it was read.
    reloads = _Reloads()

    def apply_config(new: Config) -> None:
        old_flat, new_flat = flatten(state["cfg"]), flatten(new)
        changed = [k for k in new_flat if new_flat[k] != old_flat.get(k)]
        for k in changed:
            if k not in LIVE_KEYS:
                log.warning("config %s changed: needs a restart to take effect", k)
        live = {k for k in changed if k in LIVE_KEYS}
        if live:
            merged = _merge_live(state["cfg"], new, live)
            runtime.config = merged
            state["cfg"] = merged
            set_level(merged.logging.level)
            log.info("reloaded: %s", ", ".join(sorted(live)))
        else:
            log.info("reload: nothing to change live")

    async def reload_lexicon() -> None:
        # The lexicon file is read again even when its path did not change (that is the
        # point of a reload); new requests use it once it is in, requests in flight keep
        # the one they started with.
        cfg = state["cfg"]
        try:
            new = await file_reads.run(
                functools.partial(_load_lexicon, cfg, runtime),
                cfg.voices.lexicon or "lexicon",
                cfg.voices.lexicon_timeout_s,
            )
        except LexiconError as exc:
            log.error("lexicon reload refused, keeping the old one: %s", exc)
            return
        runtime.lexicon = new
        log.info("lexicon: %s", f"{len(new)} entries from {new.source}" if new else "none")

    async def reload_files() -> None:
        try:
            new = await file_reads.run(
                functools.partial(load_config, config_path),
                str(config_path),
                _CONFIG_READ_TIMEOUT_S,
                ConfigError,
            )
        except ConfigError as exc:
            log.error("reload refused: %s", exc)
            return
        apply_config(new)
        await reload_lexicon()

    async def reload_once() -> None:
        notifier.reloading()
        try:
            await reload_files()
        except Exception as exc:  # a bug: one line, and the next SIGHUP still works
            log.error("reload failed, keeping the old settings: %s", exc)
            log.debug("reload failure", exc_info=True)
        finally:
            notifier.ready(status=_status_line(runtime))

    def reload() -> None:
        task = reloads.request(reload_once)
        if task is None:
            log.info("reload: already reloading; the file is read again after this one")
            return
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    loop.add_signal_handler(signal.SIGHUP, reload)
    try:
        # Ping, info and health are answered from here on, requests once the voices are
        # warm; READY=1 and "ready" also wait for the speaker to run (or to be found
        # missing), so a speak after them is as quick as any other.
        await _until_stopped(loop.run_in_executor(None, _warm, runtime), stop_requested)
        if not stop_requested.is_set():
            service.release_requests()
        await _until_stopped(player_started, stop_requested)
        if player is not None and not stop_requested.is_set():
            await _until_stopped(
                loop.run_in_executor(None, _speaker_running, player), stop_requested
            )
        if not stop_requested.is_set():
            service.release_speech()
            notifier.ready(status=_status_line(runtime))
            log.info(
                "ready: backend=%s voices=%s playback=%s",
                runtime.backend_status.get("backend", "onnx-cpu"),
                ",".join(runtime.voices),
                player.health()["state"] if player is not None else "off",
            )
        await server.serve()
    finally:
        for door in doors:
            await door.close()
        for t in list(tasks):
            t.cancel()
        service.close()
        runtime.close()
        notifier.close()
    return 0


def _warm(runtime: Runtime) -> None:
    runtime.finish_start()
    # Cutting a voice on first start leaves ~200 MB of freed heap behind: give it back.
    memory.trim()


def _start_player(
    cfg: Config, loop: asyncio.AbstractEventLoop
) -> tuple[Player | None, asyncio.Future[None] | None]:
    """The speaker, being opened in a worker (``starting`` until it runs), and that work."""
    if not cfg.playback.enabled:
        return None, None
    from appliance.playback import Player

    # Opened once and kept running, so no device opening stands between a request and its
    # first sound.  Never raises: no device means "off" with a warning.
    player = Player(cfg.playback)
    player.starting()
    return player, loop.run_in_executor(None, player.start)


def _speaker_running(player: Player) -> None:
    """Once the start-up's own work is done: the stream runs now (see Player.wait_running)."""
    if player.health()["state"] == "ok" and not player.wait_running():
        log.warning("playback: the output stream is not running steadily yet")


async def _until_stopped(work: asyncio.Future[None] | None, stop: asyncio.Event) -> None:
    """``work`` done (its exception raised), or ``stop`` set (SIGTERM during start-up)."""
    if work is None:
        return
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    waiting: set[asyncio.Future[Any]] = {work, stopping}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if work.done():
        work.result()


def _front_ends(cfg: Config, service: Service) -> list[Door]:
    """The doors beyond protocol v1 that the config turns on (each on the same core)."""
    doors: list[Door] = []
    if cfg.http.listen:
        from appliance.http import HttpDoor

        doors.append(HttpDoor(service, cfg.http))
    if cfg.wyoming.uri:
        from appliance.wyoming import WyomingDoor

        doors.append(WyomingDoor(service, cfg.wyoming.uri))
    return doors


class _Reloads:
    """At most one reload running; requests during it fold into one more run after it."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.again = False

    def request(self, reload_once: Callable[[], Awaitable[None]]) -> asyncio.Task[None] | None:
        """The task started for this request; None when it joined the running one."""
        if self.task is not None:
            self.again = True
            return None
        self.task = asyncio.get_running_loop().create_task(self._run(reload_once))
        return self.task

    async def _run(self, reload_once: Callable[[], Awaitable[None]]) -> None:
        try:
            while True:
                self.again = False
                await reload_once()
                if not self.again:
                    return
        finally:
            self.task = None


_CONFIG_READ_TIMEOUT_S = 30.0
"""A reload's read of the config file past this is given up (a hung file system)."""


class _FileReads:
    """Blocking file reads (config, lexicon) in threads of their own, with a deadline.

    Not the loop's executor: a read stuck in the kernel (a hung network file system) can
    neither be cancelled nor joined, and the executor's threads are joined at exit, so one
    stuck read kept SIGTERM from stopping the daemon.  A read past its deadline is left
    behind in a daemon thread; while it is stuck, another read of the same file is refused
    rather than started beside it."""

    def __init__(self) -> None:
        self._stuck: set[str] = set()

    async def run(
        self,
        fn: Callable[[], _T],
        name: str,
        timeout_s: float,
        error: Callable[[str], Exception] | None = None,
    ) -> _T:
        """``fn()``'s result; ``error`` (default LexiconError) of a one-line message on a
        timeout or while an earlier read of ``name`` is stuck."""
        from appliance.lexicon import LexiconError

        fail = error or LexiconError
        if name in self._stuck:
            raise fail(f"{name}: an earlier read has not returned; not reading it again yet")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_T] = loop.create_future()
        thread = threading.Thread(
            target=_settle_from_thread, args=(loop, fut, fn, self._stuck, name), daemon=True
        )
        self._stuck.add(name)
        thread.start()
        try:
            return await asyncio.wait_for(fut, timeout_s)  # cancels fut: the late result is dropped
        except TimeoutError:
            raise fail(f"{name}: not read within {timeout_s:g} s") from None


def _settle_from_thread(
    loop: asyncio.AbstractEventLoop,
    fut: asyncio.Future[_T],
    fn: Callable[[], _T],
    stuck: set[str],
    name: str,
) -> None:
    def settle(result: _T | None, exc: BaseException | None) -> None:
        stuck.discard(name)
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)  # type: ignore[arg-type]

    try:
        result, exc = fn(), None
    except Exception as error:  # handed to the awaiting task, which reports it
        result, exc = None, error
    try:
        loop.call_soon_threadsafe(settle, result, exc)
    except RuntimeError:
        pass  # the loop is closed: the daemon stopped while this read was stuck


def _inject_stall(runtime: Runtime, seconds: float) -> None:
    """Test hook (``TTSD_TEST_STALL_WORKER``): the first work item hangs its worker.

    Lets the tests see the systemd watchdog being withheld while a worker is
    wedged.  Never set in production.
    """
    log.warning("TTSD_TEST_STALL_WORKER: the first work item will stall %.1f s", seconds)
    scheduler = runtime.scheduler
    real_submit = scheduler.submit

    def stalled(fn: Callable[[], Any]) -> Any:
        time.sleep(seconds)
        return fn()

    def submit_once(fn: Callable[[], Any], **kw: Any) -> Any:
        setattr(scheduler, "submit", real_submit)  # noqa: B010 - undo the one-shot wrapper
        return real_submit(functools.partial(stalled, fn), **kw)

    setattr(scheduler, "submit", submit_once)  # noqa: B010


def _load_lexicon(cfg: Config, runtime: Runtime) -> Lexicon | None:
    from appliance.lexicon import load_checked

    if not cfg.voices.lexicon:
        return None
    infos = [v.phonemizer.info for v in runtime.voices.values()]
    return load_checked(cfg.voices.lexicon, infos)


def _merge_live(old: Config, new: Config, live: set[str]) -> Config:
    import dataclasses

    sections = {}
    for f in dataclasses.fields(old):
        sec_old = getattr(old, f.name)
        sec_new = getattr(new, f.name)
        changes = {
            k.split(".", 1)[1]: getattr(sec_new, k.split(".", 1)[1])
            for k in live
            if k.startswith(f.name + ".")
        }
        sections[f.name] = dataclasses.replace(sec_old, **changes) if changes else sec_old
    return dataclasses.replace(old, **sections)


def _load_for_command(path: str | None) -> Config | None:
    """The config for serve/prepare, with logging set up; None (message printed) if invalid."""
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        print(f"ttsd: config: {exc}", file=sys.stderr)
        return None
    _configure_logging(cfg.logging.level)
    return cfg


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = _load_for_command(args.config)
    if cfg is None:
        return 2
    if cfg.tuning.numa_bind:
        # Before any thread pool exists, so every thread inherits the binding.
        from appliance import nvml
        from tuning.numa import bind_self

        bind_self(cfg.tuning, nvml.load())  # logs what it did
    from appliance.paths import default_socket_path, prepare_socket_dir

    path = Path(args.socket or cfg.server.socket or default_socket_path())
    if args.http:
        cfg = dataclasses.replace(cfg, http=dataclasses.replace(cfg.http, listen=args.http))
    if args.wyoming:
        try:  # WyomingConfig checks the URI
            wyoming = dataclasses.replace(cfg.wyoming, uri=args.wyoming)
        except ConfigError as exc:
            print(f"ttsd: --wyoming: {exc}", file=sys.stderr)
            return 2
        cfg = dataclasses.replace(cfg, wyoming=wyoming)
    try:
        prepare_socket_dir(path)  # here too: refuse before a minute of loading voices
    except OSError as exc:
        log.error("cannot listen on %s: %s", path, exc)
        return 1
    memory.limit_malloc_arenas(2)  # before any thread allocates
    return asyncio.run(_serve(cfg, args.config, path))


def cmd_check_config(args: argparse.Namespace) -> int:
    from appliance.lexicon import LexiconError, load_for_config

    path = args.file
    try:
        cfg = load_config(path)
        if cfg.voices.lexicon:
            load_for_config(cfg.voices.lexicon, cfg.voices.voices_dir)
    except (ConfigError, LexiconError) as exc:
        print(f"ttsd: {exc}", file=sys.stderr)
        return 1
    print(f"{path or 'defaults'}: ok")
    return 0


def _progress(name: str, msg: str) -> None:
    print(f"{name}: {msg}", flush=True)


def cmd_prepare(args: argparse.Namespace) -> int:
    cfg = _load_for_command(args.config)
    if cfg is None:
        return 2
    from appliance.engine.gpu_select import prepare_engines
    from appliance.voices import default_cache_dir, discover, load_voice

    cache = Path(cfg.voices.cache_dir) if cfg.voices.cache_dir else default_cache_dir()
    failed = 0
    for name, path in discover(cfg.voices.voices_dir).items():
        try:
            voice = load_voice(name, path, cache)
        except Exception as exc:  # a foreign file: protobuf, onnxruntime, JSON errors …
            print(f"{name}: skipped ({path}): {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: {'streaming' if voice.split_ok else 'whole-sentence'} ({voice.split_note})")
        prepare_engines(voice, cfg, functools.partial(_progress, name))
    return 1 if failed else 0


def cmd_tune(argv: list[str]) -> int:
    from tuning.cli import main as tune_main

    return tune_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "tune":
        return cmd_tune(argv[1:])
    parser = argparse.ArgumentParser(prog="ttsd", description="Local streaming TTS daemon")
    # install.sh runs it under the unit's sandbox: proof the service can start this Python.
    parser.add_argument("--version", action="version", version=f"ttsd {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="run the daemon in the foreground")
    p.add_argument("--socket", help="socket path (default: per user, or /run/ttsd/ttsd.sock)")
    p.add_argument("--config", help="YAML config (default: /etc/ttsd/config.yaml if present)")
    p.add_argument(
        "--http", metavar="HOST:PORT", help="serve the OpenAI-compatible HTTP API (http.listen)"
    )
    p.add_argument(
        "--wyoming",
        metavar="URI",
        help="also serve Wyoming (Home Assistant) on tcp://HOST:PORT or unix://PATH",
    )
    p.set_defaults(fn=cmd_serve)
    p = sub.add_parser("check-config", help="validate a config file")
    p.add_argument("file", nargs="?", default=None)
    p.set_defaults(fn=cmd_check_config)
    p = sub.add_parser("prepare", help="split voices and build engines ahead of time")
    p.add_argument("--config")
    p.set_defaults(fn=cmd_prepare)
    sub.add_parser("tune", help="system tuning: plan|apply|verify|revert (see ttsd tune -h)")
    args = parser.parse_args(argv)
    rc: int = args.fn(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
