"""The real daemon under systemd's protocols: sd_notify + watchdog, and socket activation.

A datagram socket stands in for systemd's notify socket; a socket bound and listening in
this process stands in for ``ttsd.socket``.  The test daemon's ``--stall-first-item
SECONDS`` seam (tests/fakes/daemon.py) makes its inference worker hang that long on its
first work item: a wedged model call.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from service_helpers import activated_command

from appliance.clients.client import Client

WATCHDOG_USEC = 1_000_000  # pings every 0.5 s; a worker busy for over 1 s is stale


class NotifyLog:
    """systemd's side of sd_notify: every datagram with its arrival time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.messages: list[tuple[float, str]] = []

    def wait_for(self, pred: Callable[[str], bool], timeout: float) -> str:
        """Read until a message satisfies ``pred``; all messages are kept."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                msg = self.sock.recv(4096).decode()
            except TimeoutError:
                break
            self.messages.append((time.monotonic(), msg))
            if pred(msg):
                return msg
        seen = [m for _t, m in self.messages]
        raise AssertionError(f"no matching sd_notify message within {timeout}s; got {seen}")

    def drain(self) -> None:
        self.sock.setblocking(False)
        try:
            while True:
                self.messages.append((time.monotonic(), self.sock.recv(4096).decode()))
        except BlockingIOError:
            pass

    def fields(self) -> list[dict[str, str]]:
        return [dict(line.split("=", 1) for line in m.split("\n")) for _t, m in self.messages]

    def times_of(self, key: str, since: float = 0.0) -> list[float]:
        out = []
        for t, m in self.messages:
            if t >= since and any(line.startswith(key + "=") for line in m.split("\n")):
                out.append(t)
        return out


@pytest.fixture
def notify_log() -> Iterator[NotifyLog]:
    with tempfile.TemporaryDirectory(prefix="ttsd-n-") as d:
        log = NotifyLog(os.path.join(d, "notify"))
        yield log
        log.sock.close()


def _env(notify: NotifyLog, **extra: str) -> dict[str, str]:
    return {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": str(WATCHDOG_USEC), **extra}


def _has(key: str) -> Callable[[str], bool]:
    return lambda msg: any(line.startswith(key + "=") for line in msg.split("\n"))


def test_ready_then_watchdog_then_stopping(daemon_factory: Any, notify_log: NotifyLog) -> None:
    daemon = daemon_factory(env=_env(notify_log))
    notify_log.wait_for(_has("READY"), timeout=60)
    start = time.monotonic()
    for _ in range(3):
        notify_log.wait_for(_has("WATCHDOG"), timeout=10)
    assert time.monotonic() - start < 10
    with Client(daemon.socket, timeout=60) as c:
        assert c.synthesize_all("Status check.").samples().size > 0
    assert daemon.stop(signal.SIGTERM) == 0
    notify_log.drain()
    fields = notify_log.fields()
    statuses = [f["STATUS"] for f in fields if "STATUS" in f]
    assert any("onnx-cpu" in s and "en_US-joe-medium" in s for s in statuses), statuses
    stopping = [i for i, f in enumerate(fields) if f.get("STOPPING") == "1"]
    ready = [i for i, f in enumerate(fields) if f.get("READY") == "1"]
    assert stopping and ready and ready[0] < stopping[0], fields
    # No ping claims health once shutdown has begun.
    assert not [f for f in fields[stopping[0] :] if "WATCHDOG" in f]


def test_watchdog_is_withheld_while_a_worker_is_wedged(
    daemon_factory: Any, notify_log: NotifyLog
) -> None:
    stall_s = 5.0
    daemon = daemon_factory(env=_env(notify_log), seams=["--stall-first-item", str(stall_s)])
    notify_log.wait_for(_has("READY"), timeout=60)
    notify_log.wait_for(_has("WATCHDOG"), timeout=10)
    result: dict[str, Any] = {}

    def synthesize() -> None:
        with Client(daemon.socket, timeout=120) as c:
            result["samples"] = c.synthesize_all("The worker hangs on this one.").samples().size

    sent = time.monotonic()
    worker = threading.Thread(target=synthesize)
    worker.start()
    # The stall ends after stall_s; pings must come back after it.
    while worker.is_alive() and time.monotonic() - sent < 120:
        try:
            notify_log.wait_for(_has("WATCHDOG"), timeout=1.0)
        except AssertionError:
            pass
    worker.join(timeout=1)
    notify_log.wait_for(_has("WATCHDOG"), timeout=10)
    pings = [sent, *notify_log.times_of("WATCHDOG", since=sent)]
    longest_gap = max(b - a for a, b in itertools.pairwise(pings))
    # Normal spacing is 0.5 s; the stall silences the watchdog for about stall_s - 1 s.
    assert longest_gap >= 2.5, pings
    statuses = [f["STATUS"] for f in notify_log.fields() if "STATUS" in f]
    assert any("stalled" in s for s in statuses), statuses
    # The request itself was delayed, not lost.
    assert result.get("samples", 0) > 0
    assert daemon.stop() == 0


def test_activated_socket_is_served_and_never_unlinked(voice_cache: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "voices": {"cache_dir": str(voice_cache)},
                "engine": {"backend": "onnx-cpu"},
                "playback": {"enabled": False},
            }
        )
    )
    with tempfile.TemporaryDirectory(prefix="ttsd-a-") as d:
        path = os.path.join(d, "ttsd.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(16)
        # The same path as --socket: a daemon that tried to bind it itself would find it taken.
        argv = [sys.executable, "-m", "appliance.main", "serve", "--config", str(cfg)]
        argv += ["--socket", path]
        log_path = tmp_path / "daemon.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                activated_command(listener.fileno(), argv),
                env={**os.environ, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "ttsd.socket"},
                pass_fds=(listener.fileno(),),
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        try:
            # Connecting works at once (the backlog is ours); the answer comes once it is up.
            with Client(path, timeout=120) as c:
                assert c.ping()
                assert c.info()["default_voice"] == "en_US-joe-medium"
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
        assert rc == 0, log_path.read_text()
        assert stat.S_ISSOCK(os.lstat(path).st_mode), "the daemon unlinked systemd's socket"
        # systemd's copy still listens: the next client would queue for the restarted daemon.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(path)
        probe.close()
        listener.close()
