"""Shared fixtures: the real daemon as a subprocess on a temporary socket."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from appliance.ops.config import SchedulerConfig

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.cgroups"]
"""Fixtures shared by packages' tests: ``half_a_cpu`` (a real cgroup)."""


@dataclass
class Daemon:
    socket: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    config_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.reap(timeout)
        return self.proc.returncode

    def reap(self, timeout: float) -> None:
        """Wait for the process to end; kill it when it outlives ``timeout``."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def interrupt(
    proc: subprocess.Popen[Any], said: Callable[[], list[str]], sig: int = signal.SIGINT
) -> tuple[int, float, list[str]]:
    """``sig`` (Ctrl-C's by default) to ``proc``: its exit status, the seconds it took to
    exit, and the lines it said after the signal (``said()``: every line so far)."""
    before = len(said())
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return rc, time.monotonic() - t0, said()[before:]


def let_anyone_walk_to(path: str | Path) -> None:
    """Give others search (x) permission on ``path``'s parents below /tmp: pytest's temp
    dirs are private, and a test that runs a client as another user needs it to get there."""
    for parent in Path(path).parents:
        if parent == Path("/tmp"):
            break
        parent.chmod(parent.stat().st_mode | 0o011)


def flood_until_closed(sock: socket.socket, data: bytes, limit_s: float = 30.0) -> tuple[int, bool]:
    """Send ``data`` without ever reading, until the peer closes or ``limit_s`` passes.

    Returns the bytes sent and whether the peer closed the connection (a daemon whose
    output bound works stops reading, then drops a client that never reads).
    """
    sock.settimeout(0.2)
    sent, t0 = 0, time.monotonic()
    while sent < len(data) and time.monotonic() - t0 < limit_s:
        try:
            sent += sock.send(data[sent : sent + 65536])
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return sent, True
    return sent, False


def wait_for_socket(path: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}:\n{log.read_text()}")
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                return
            except OSError:
                pass
            finally:
                s.close()
        time.sleep(0.05)
    raise RuntimeError(f"daemon did not listen within {timeout}s:\n{log.read_text()}")


def wait_until_started(path: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Until ``health`` says ``warm`` (first packets warm, speaker running or off) and the
    rest of its warm-up done: a test starts on a quiet daemon."""
    from tests.wire import Wire

    deadline = time.monotonic() + timeout
    while True:
        try:  # a fresh connection each time: a test may allow only one at once
            with Wire(path, timeout=timeout) as w:
                health = w.call({"op": "health", "id": 0})
                if (
                    health["event"] == "health"
                    and health.get("starting") is not True
                    and health.get("warm_up", "done") == "done"
                ):
                    return
        except (ConnectionError, OSError):
            pass  # refused while the probe's slot was still held
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}:\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"daemon did not finish starting:\n{log.read_text()}")
        time.sleep(0.05)


DaemonFactory = Callable[..., Daemon]

ROOMY_ADMISSION = {"admission_max_load": 8.0, "admission_backlog_ms": 600000.0}
"""The test daemons' admission unless a test sets its own: a protocol's behaviour must not
depend on what else the box runs (a CI box under two test processes projected 0.65 of
the workers for two concurrent streams and refused them against the product's 0.40).
Tests of admission itself give the keys they test (test_sched_overload: the defaults)."""


def roomy_scheduler() -> SchedulerConfig:
    """:data:`ROOMY_ADMISSION` for a ``Runtime.load`` in the test process (a door's
    protocol tests serving two streams at once)."""
    from appliance.ops.config import SchedulerConfig  # conftest imports no appliance at load

    return SchedulerConfig(**ROOMY_ADMISSION)


@pytest.fixture(scope="session", autouse=True)
def voice_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's daemons and in-process loads keep the voices' cuts (so each
    voice is cut once a session), tests/fakes/voice.py's ``real_voice`` too: set up for
    every test, before any of them can call that.  One directory for every xdist worker
    of the session: each worker cutting the bundled voice for itself took minutes on a
    loaded box, and the first daemons waiting behind it failed to listen in time."""
    from tests.fixtures import share_voice_cache

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cache = shared / "voice-cache"
    cache.mkdir(exist_ok=True)
    share_voice_cache(cache)
    return cache


def cut_bundled_once(cache: Path) -> None:
    """The bundled voice cut into ``cache`` by one process of the session (the others wait
    on a lock beside it, then find the cut): before a daemon starts, so its start-up
    timeout is not spent on the cut."""
    import fcntl

    from appliance.model.voices import bundled_voice_path, load_voice

    with (cache.parent / f"{cache.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        load_voice(bundled_voice_path().name.removesuffix(".onnx"), bundled_voice_path(), cache)


@pytest.fixture(scope="session")
def bundled_cut(voice_cache: Path) -> Path:
    """The session's voice cache with the bundled voice cut in it (15-30 s, once a
    session), for a test that times a daemon's start-up or interrupts it."""
    cut_bundled_once(voice_cache)
    return voice_cache


@pytest.fixture(scope="session")
def daemon_factory(
    tmp_path_factory: pytest.TempPathFactory, voice_cache: Path
) -> Iterator[DaemonFactory]:
    started: list[Daemon] = []
    cut = [False]

    def start(
        config: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120.0,
        args: list[str] | None = None,
        nofile: int | None = None,
        ready: bool = True,
        seams: list[str] | None = None,
        cgroup: Path | None = None,
    ) -> Daemon:
        """``nofile``: the daemon's limit on open files (soft and hard), as a unit's
        ``LimitNOFILE`` sets it.  ``seams``: the options of tests/fakes/daemon.py (a
        stalled worker, a frontend that raises); the daemon is then run through it.
        ``cgroup``: a cgroup directory the daemon starts in (its ``cgroup.procs``), as a
        unit's ``CPUQuota=`` puts it in one."""
        if not cut[0]:
            cut_bundled_once(voice_cache)  # every daemon loads the bundled voice
            cut[0] = True
        d = tmp_path_factory.mktemp("daemon")
        cfg: dict[str, Any] = {"voices": {"cache_dir": str(voice_cache)}, "logging": {}}
        for key, value in (config or {}).items():
            if isinstance(value, dict):
                cfg.setdefault(key, {}).update(value)
            else:
                cfg[key] = value
        cfg.setdefault("engine", {}).setdefault("backend", "onnx-cpu")
        # Off unless a test asks (tests/daemon/test_keepwarm.py): a touch between two reads
        # of ``stats`` would count in the model runs a test expects of its own requests.
        cfg["engine"].setdefault("keep_warm_s", 0.0)
        for key, value in ROOMY_ADMISSION.items():  # tests of admission set their own
            cfg.setdefault("scheduler", {}).setdefault(key, value)
        cfg.setdefault("playback", {}).setdefault("enabled", False)
        cfg_path = d / "config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        sock = str(d / "ttsd.sock")
        log_path = d / "daemon.log"
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        entry = ["tests.fakes.daemon", *seams] if seams is not None else ["appliance.main"]
        if seams is not None:  # the tests package, from any working directory
            full_env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO), full_env.get("PYTHONPATH", "")) if p
            )
        cmd = [sys.executable, "-m", *entry, "serve", "--socket", sock]
        cmd += ["--config", str(cfg_path), *(args or [])]

        def in_child() -> None:  # after the fork, before it runs Python
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            if cgroup is not None:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))

        limit = in_child if nofile is not None or cgroup is not None else None

        with log_path.open("wb") as logf:
            proc = subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, env=full_env, preexec_fn=limit
            )
        daemon = Daemon(sock, proc, log_path, cfg_path, full_env)
        started.append(daemon)
        wait_for_socket(sock, proc, log_path, timeout)
        if ready:  # the socket answers before the warm-up is over; tests get a quiet daemon
            wait_until_started(sock, proc, log_path, timeout)
        return daemon

    yield start
    stop_all(started, timeout=15)


def stop_all(daemons: list[Daemon], timeout: float) -> None:
    """Every one of ``daemons`` stopped at once: SIGTERM to all, then each waited for (and
    killed when it outlives ``timeout``).  One after the other (``Daemon.stop``), the
    session's last teardown took half a minute: every daemon with HTTP or the agent on
    says ``drain`` for ``limits.drain_notice_s`` before it stops."""
    for daemon in daemons:
        if daemon.alive():
            daemon.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for daemon in daemons:
        daemon.reap(max(0.1, deadline - time.monotonic()))


@pytest.fixture(scope="session")
def daemon(daemon_factory: DaemonFactory) -> Daemon:
    """One shared daemon with test-friendly limits (short client_too_slow)."""
    return daemon_factory(
        {
            "limits": {
                "client_too_slow_s": 2.0,
                "max_output_buffer_bytes": 262144,
                "max_text_chars": 20000,
            }
        }
    )
