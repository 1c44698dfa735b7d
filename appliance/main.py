"""``ttsd``: the daemon and its admin commands (serve, prepare, tune, check-config)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import signal
import sys
from pathlib import Path

from appliance.config import LIVE_KEYS, Config, ConfigError, flatten, load_config

log = logging.getLogger("ttsd")


def _configure_logging(level: str) -> None:
    try:
        from appliance.logsetup import configure_logging
    except ImportError:
        logging.basicConfig(
            level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        return
    configure_logging(level)


async def _serve(cfg: Config, config_path: str | None, socket_path: Path) -> int:
    from appliance.runtime import Runtime
    from appliance.server import Server

    loop = asyncio.get_running_loop()
    activated = None
    try:
        from appliance.activation import listen_fds

        fds = listen_fds()
        activated = fds[0] if fds else None
    except ImportError:
        pass
    # Loading voices is slow I/O and inference: keep it off the event loop.
    runtime = await loop.run_in_executor(None, Runtime.load, cfg)
    server = Server(runtime, socket_path, activated)
    try:
        await server.start()
    except OSError as exc:
        log.error("cannot listen on %s: %s", socket_path, exc)
        runtime.close()
        return 1
    state = {"cfg": cfg}

    def reload() -> None:
        try:
            new = load_config(config_path)
        except ConfigError as exc:
            log.error("reload refused: %s", exc)
            return
        old_flat, new_flat = flatten(state["cfg"]), flatten(new)
        changed = [k for k in new_flat if new_flat[k] != old_flat.get(k)]
        restart = [k for k in changed if k not in LIVE_KEYS]
        for k in restart:
            log.warning("config %s changed: needs a restart to take effect", k)
        live = {k for k in changed if k in LIVE_KEYS}
        if not live:
            log.info("reload: nothing to change live")
            return
        # Apply only the live keys: rebuild sections from the old config with them.
        merged = _merge_live(state["cfg"], new, live)
        runtime.config = merged
        state["cfg"] = merged
        logging.getLogger().setLevel(merged.logging.level.upper())
        log.info("reloaded: %s", ", ".join(sorted(live)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    loop.add_signal_handler(signal.SIGHUP, reload)
    log.info(
        "ready: backend=%s voices=%s",
        runtime.backend_status.get("backend", "onnx-cpu"),
        ",".join(runtime.voices),
    )
    try:
        await server.serve()
    finally:
        runtime.close()
    return 0


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


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"ttsd: config: {exc}", file=sys.stderr)
        return 2
    _configure_logging(cfg.logging.level)
    if cfg.tuning.numa_bind:
        # Before any thread pool exists, so every thread inherits the binding.
        from appliance import nvml
        from tuning.numa import bind_self

        bind_self(cfg.tuning, nvml.load())  # logs what it did
    from appliance.server import default_socket_path

    path = Path(args.socket or cfg.server.socket or default_socket_path())
    return asyncio.run(_serve(cfg, args.config, path))


def cmd_check_config(args: argparse.Namespace) -> int:
    path = args.file
    try:
        load_config(path)
    except ConfigError as exc:
        print(f"ttsd: {exc}", file=sys.stderr)
        return 1
    print(f"{path or 'defaults'}: ok")
    return 0


def _progress(name: str, msg: str) -> None:
    print(f"{name}: {msg}", flush=True)


def cmd_prepare(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"ttsd: config: {exc}", file=sys.stderr)
        return 2
    _configure_logging(cfg.logging.level)
    from appliance.voices import default_cache_dir, discover, load_voice

    cache = Path(cfg.voices.cache_dir) if cfg.voices.cache_dir else default_cache_dir()
    for name, path in discover(cfg.voices.voices_dir).items():
        voice = load_voice(name, path, cache)
        print(f"{name}: {'streaming' if voice.split_ok else 'whole-sentence'} ({voice.split_note})")
        try:
            from appliance.engine.gpu_select import prepare_engines
        except ImportError:
            continue
        prepare_engines(voice, cfg, functools.partial(_progress, name))
    return 0


def cmd_tune(argv: list[str]) -> int:
    from tuning.cli import main as tune_main

    return tune_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "tune":
        return cmd_tune(argv[1:])
    parser = argparse.ArgumentParser(prog="ttsd", description="Local streaming TTS daemon")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="run the daemon in the foreground")
    p.add_argument("--socket", help="socket path (default: per user, or /run/ttsd/ttsd.sock)")
    p.add_argument("--config", help="YAML config (default: /etc/ttsd/config.yaml if present)")
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
