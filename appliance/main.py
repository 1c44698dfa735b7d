"""``ttsd``: the daemon and its admin commands (serve, prepare, tune, check-config)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from appliance import __version__
from appliance.ops import atomic, memory
from appliance.ops.config import Config, ConfigError, Flags, load_config

if TYPE_CHECKING:
    from appliance.daemon import Seams
    from appliance.text.lexicon import Lexicon

log = logging.getLogger("ttsd")
_T = TypeVar("_T")


def _configure_logging(level: str) -> None:
    from appliance.ops.logsetup import configure_logging

    configure_logging(level)


def _load_for_command(path: str | None, flags: Flags | None = None) -> Config | None:
    """The config for serve/prepare (``flags`` over the file), with logging set up; None
    (every problem printed) if invalid."""
    try:
        cfg = load_config(path, flags)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"ttsd: config: {problem}", file=sys.stderr)
        return None
    _configure_logging(cfg.logging.level)
    return cfg


def cmd_serve(args: argparse.Namespace, seams: Seams | None = None) -> int:
    """``ttsd serve``; ``seams``: what a test's own entry point puts into the daemon.

    Ctrl-C (or SIGTERM) before the daemon is ready stops it within a fraction of a second
    with one line (exit 130 for Ctrl-C): until the daemon's loop takes the signals over,
    :func:`_interrupted_early` does it; after, the daemon (see :func:`_leave_start_up`)."""
    # First: reading the config and importing take a while.
    before = signal.signal(signal.SIGINT, _interrupted_early)
    # SIGHUP's default action ends the process; until the daemon's loop takes it over
    # (and runs a reload once serving), one is ignored: the config is being read now.
    hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return _serve(args, seams)
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGHUP, hup)


def _interrupted_early(signum: int, _frame: Any) -> None:
    _leave_start_up(signal.Signals(signum), 130)


def _serve(args: argparse.Namespace, seams: Seams | None) -> int:
    flags = serve_flags(args)
    cfg = _load_for_command(args.config, flags)
    if cfg is None:
        return 2
    if cfg.tuning.numa_bind:
        # Before any thread pool exists, so every thread inherits the binding.
        from appliance.ops import nvml
        from tuning.numa import bind_self

        bind_self(cfg.tuning, nvml.load())  # logs what it did
    from appliance.ops.paths import default_socket_path, prepare_socket_dir

    path = Path(cfg.v1.socket or default_socket_path())
    try:
        prepare_socket_dir(path)  # here too: refuse before a minute of loading voices
    except OSError as exc:
        log.error("cannot listen on %s: %s", path, exc)
        return 1
    memory.limit_malloc_arenas(2)  # before any thread allocates
    from appliance.daemon import Daemon

    daemon = Daemon(cfg, args.config, path, seams, flags)
    rc = asyncio.run(daemon.run())
    if daemon.interrupted is not None:
        _leave_start_up(daemon.interrupted, rc)
    return rc


def serve_flags(args: argparse.Namespace) -> Flags:
    """``serve``'s options that set config keys: a layer over the file, applied at start
    and again on every reload (so a reload sees no change where the file has none)."""
    flags: dict[str, tuple[str, object]] = {}
    for flag, key, value in (
        ("--socket", "v1.socket", args.socket),
        ("--http", "http.listen", args.http),
        ("--wyoming", "wyoming.uri", args.wyoming),
        ("--wyoming-allow", "wyoming.allowed_networks", args.wyoming_allow),
    ):
        if value:
            flags[key] = (flag, value)
    return flags


def _leave_start_up(sig: signal.Signals, status: int) -> NoReturn:
    """A start-up stopped by a signal ends here, at once: the threads it started (a voice
    being cut for the first time, a device being probed) cannot be stopped, and a normal
    exit would wait for them or tear the interpreter down under them.  Nothing is left
    half-written (:func:`appliance.ops.atomic.abandon`): the next start cuts again what
    was not finished.  One line says so; no traceback."""
    atomic.abandon()
    how = "interrupted" if sig == signal.SIGINT else f"stopped ({sig.name})"
    line = f"{how} while starting; nothing was left half-written"
    if logging.getLogger().handlers:
        log.warning("%s", line)
    else:  # before the config said how to log
        print(f"ttsd: {line}", file=sys.stderr)
    logging.shutdown()  # flush the handlers: os._exit does not
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _lexicon_for_config(path: str, voices_dir: str | None) -> Lexicon:
    """``ttsd check-config``: the lexicon checked against the voices the daemon would load
    (a voice whose config is refused is reported on its own, and serve skips it)."""
    from appliance.model.voices import VoiceError, discover
    from appliance.model.voices.pair import read_info
    from appliance.text.lexicon import load_checked

    infos = []
    for name, model in discover(voices_dir).items():
        try:
            infos.append(read_info(name, model))
        except VoiceError:
            continue
    return load_checked(path, infos)


def cmd_check_config(args: argparse.Namespace) -> int:
    """Every problem the file has (and what ``serve`` would refuse with it), one a line."""
    problems = _check_config(args.file)
    for line in problems:
        print(f"ttsd: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"{args.file or 'defaults'}: ok")
    return 0


def _check_config(path: str | None) -> list[str]:
    from appliance.text.lexicon import LexiconError

    try:
        cfg = load_config(path)
    except ConfigError as exc:
        return exc.problems
    problems = _serve_would_refuse(cfg)
    if cfg.voices.lexicon:
        try:
            _lexicon_for_config(cfg.voices.lexicon, cfg.voices.voices_dir)
        except LexiconError as exc:
            problems.append(str(exc))
    return problems


def _serve_would_refuse(cfg: Config) -> list[str]:
    """What ``serve`` would refuse or skip, found without loading a voice (no session, no
    cut): the default voice, each voice pair's files, a public HTTP address without a key."""
    from appliance.model.voices import discover
    from appliance.model.voices.manage import check_dir

    problems = [f"voice file {f}: {why}" for f, why in check_dir(cfg.voices.voices_dir).items()]
    found = discover(cfg.voices.voices_dir)
    if cfg.voices.default not in found:
        have = ", ".join(sorted(found))
        problems.append(f"voices.default: voice {cfg.voices.default!r} not found (have: {have})")
    h = cfg.http
    if h.listen and h.api_key is None:
        from appliance.doors.net import is_loopback, parse_listen

        try:
            host, _port = parse_listen(h.listen, "http listen address")
        except ValueError as exc:
            return [*problems, f"http.listen: {exc}"]
        if h.api_key_file:
            if not os.access(h.api_key_file, os.R_OK):
                problems.append(f"http.api_key_file {h.api_key_file}: not readable")
        elif not is_loopback(host):
            problems.append(
                f"http.listen {h.listen}: not loopback and no API key"
                " (set http.api_key or http.api_key_file, or listen on 127.0.0.1)"
            )
    return problems


def cmd_voices(args: argparse.Namespace) -> int:
    """``ttsd voices add|remove``: the files in ``voices.voices_dir`` (docs/voices.md)."""
    cfg = _load_for_command(args.config)
    if cfg is None:
        return 2
    from appliance.model.voices import VoiceError
    from appliance.model.voices.manage import add_voice, remove_voice
    from appliance.ops.paths import default_cache_dir

    if not cfg.voices.voices_dir:
        print("ttsd: voices.voices_dir is not set in the config", file=sys.stderr)
        return 2
    voices_dir = Path(cfg.voices.voices_dir)
    try:
        if args.action == "remove":
            for gone in remove_voice(args.name, voices_dir):
                print(f"removed {gone}")
        else:
            cache = Path(cfg.voices.cache_dir) if cfg.voices.cache_dir else default_cache_dir()
            conf = Path(args.config_json) if args.config_json else None
            voice = add_voice(Path(args.model), conf, voices_dir, cache, print)
            print(f"{voice.name}: added, streaming ({voice.info.language})")
    except VoiceError as exc:
        print(f"ttsd: {exc}", file=sys.stderr)
        return 1
    print(
        "a running daemon picks the change up on SIGHUP: systemctl kill --signal=SIGHUP"
        " --kill-whom=main ttsd, or kill -HUP PID (the pid its ready line names)"
    )
    return 0


def _progress(name: str, msg: str) -> None:
    print(f"{name}: {msg}", flush=True)


def cmd_prepare(args: argparse.Namespace) -> int:
    cfg = _load_for_command(args.config)
    if cfg is None:
        return 2
    from appliance.model.engine.blocked import blocked_lean
    from appliance.model.engine.gpu_select import prepare_engines
    from appliance.model.voices import discover, load_voice
    from appliance.ops.paths import default_cache_dir

    cache = Path(cfg.voices.cache_dir) if cfg.voices.cache_dir else default_cache_dir()
    skipped: dict[str, str] = {}
    found = discover(cfg.voices.voices_dir, skipped)
    for file, why in skipped.items():
        print(f"{file}: skipped: {why}", file=sys.stderr)
    failed = 0
    for name, path in found.items():
        try:
            voice = load_voice(name, path, cache)
        except Exception as exc:  # a foreign file: protobuf, onnxruntime, JSON errors …
            print(f"{name}: skipped ({path}): {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            failed += 1
            continue
        how = "streaming" if voice.split_ok else f"whole-sentence ({voice.split_note})"
        print(f"{name}: {how}")  # the check's figures: at debug level (logging.level)
        if voice.lean_decoder_path is not None and voice.cut is not None:
            # Made for this machine now rather than at the daemon's first start.
            blocked_lean(voice.lean_decoder_path, voice.cut)
        prepare_engines(voice, cfg, functools.partial(_progress, name))
    return 1 if failed else 0


def cmd_tune(argv: list[str]) -> int:
    from tuning.cli import main as tune_main

    return tune_main(argv)


def main(argv: list[str] | None = None, seams: Seams | None = None) -> int:
    """The ``ttsd`` command; ``seams`` reach ``serve`` (tests/fakes/daemon.py)."""
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
    p.add_argument(
        "--wyoming-allow",
        metavar="NETWORK",
        action="append",
        help="a network whose Wyoming clients are admitted, e.g. 192.168.1.0/24 (repeat for"
        " more; replaces wyoming.allowed_networks, which admits only loopback by default)",
    )
    p.set_defaults(fn=cmd_serve)
    p = sub.add_parser("check-config", help="validate a config file")
    p.add_argument("file", nargs="?", default=None)
    p.set_defaults(fn=cmd_check_config)
    p = sub.add_parser("voices", help="add or remove a Piper voice in voices.voices_dir")
    p.add_argument("--config")
    vsub = p.add_subparsers(dest="action", required=True)
    v = vsub.add_parser("add", help="copy NAME.onnx (+ .onnx.json) in and prepare its cut")
    v.add_argument("model", metavar="PATH.onnx")
    v.add_argument("config_json", nargs="?", metavar="PATH.onnx.json")
    v.add_argument("--config", default=argparse.SUPPRESS)
    v = vsub.add_parser("remove", help="delete a voice's files from voices_dir")
    v.add_argument("name")
    v.add_argument("--config", default=argparse.SUPPRESS)
    p.set_defaults(fn=cmd_voices)
    p = sub.add_parser("prepare", help="split voices and build engines ahead of time")
    p.add_argument("--config")
    p.set_defaults(fn=cmd_prepare)
    sub.add_parser("tune", help="system tuning: plan|apply|verify|revert (see ttsd tune -h)")
    args = parser.parse_args(argv)
    rc: int = cmd_serve(args, seams) if args.fn is cmd_serve else args.fn(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
