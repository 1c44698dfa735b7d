"""The first minutes of a new user (issue 42): Ctrl-C at any point of start-up, and the
requests sent the moment the socket accepts.

- Ctrl-C while the daemon reads its config, cuts a voice for the first time or warms
  it: it stops within half a second (asked; bounded generously here, a shared box),
  says one line, exits 130, and leaves no half-written file in the voice cache; the next
  start cuts again what was not finished, or uses what was.
- ``ping`` and ``health`` say ``warm``; a request sent the moment the socket accepts is
  not held behind the warm-up's later parts (they run as batch work it goes ahead of).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import DaemonFactory, interrupt, wait_for_socket
from tests.fixtures import MULTI, voice_path
from tests.wire import Wire

STOP_BOUND_S = 1.5
"""Asked: 0.5 s (it takes 20-350 ms here); the bound leaves room for a busy shared box."""
TEXT = "Turn the kitchen lights off, please."


class Start:
    """One ``ttsd serve`` of the test voice, with its own voice cache and log."""

    def __init__(self, root: Path, cache: Path) -> None:
        voices = root / "voices"
        voices.mkdir(parents=True, exist_ok=True)
        for suffix in ("", ".json"):
            src = Path(f"{voice_path(MULTI)}{suffix}")
            shutil.copyfile(src, voices / src.name)
        self.cache = cache
        cfg: dict[str, Any] = {
            "voices": {"cache_dir": str(cache), "voices_dir": str(voices), "default": MULTI},
            "engine": {"backend": "onnx-cpu"},
            "playback": {"enabled": False},
            "logging": {"level": "debug"},
        }
        (root / "config.yaml").write_text(yaml.safe_dump(cfg))
        self.socket = str(root / "ttsd.sock")
        self.log_path = root / "daemon.log"
        cmd = [sys.executable, "-m", "appliance.main", "serve", "--socket", self.socket]
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [*cmd, "--config", str(root / "config.yaml")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until(
        self, what: Callable[[], bool], timeout: float = 300.0, pause: float = 0.002
    ) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"not reached:\n{self.log()}"
            time.sleep(pause)

    def interrupt(self) -> tuple[int, float, list[str]]:
        """SIGINT; the exit status, the seconds it took, and the lines said after it."""
        return interrupt(self.proc, lambda: self.log().splitlines())

    def temp_files(self) -> list[Path]:
        """The cache's temporary files (a graph being written: each lives milliseconds)."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for slot in os.scandir(self.cache):
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    found += [Path(e.path) for e in os.scandir(slot) if e.name.endswith(".tmp")]
        return sorted(found)


@pytest.fixture(scope="module")
def cut(bundled_cut: Path) -> Path:
    """The session's voice cache with the bundled voice (every daemon loads it) and the
    test voice cut in it."""
    from appliance.model.voices import load_voice

    load_voice(MULTI, voice_path(MULTI), bundled_cut)
    return bundled_cut


def _without_multi(voice_cache: Path, dest: Path) -> Path:
    """A copy of the session's voice cache without the test voice's cut: a start cuts that
    one only (the bundled voice, always loaded too, takes minutes on a busy box)."""
    from appliance.model.voices.cut import sha256_of

    digest = sha256_of(voice_path(MULTI))[:32]
    shutil.copytree(voice_cache, dest, ignore=lambda _d, names: [n for n in names if digest in n])
    return dest


def _assert_stopped_in_one_line(rc: int, took: float, lines: list[str]) -> None:
    # The start logs at debug level (its markers); a debug line the warm-up wrote in the
    # instant before the signal landed is not something Ctrl-C said.
    lines = [line for line in lines if " DEBUG " not in line]
    assert rc == 130, lines
    assert took < STOP_BOUND_S, (took, lines)
    assert len(lines) == 1 and "interrupted while starting" in lines[0], lines


def _serves(start: Start) -> None:
    wait_for_socket(start.socket, start.proc, start.log_path, 300)
    with Wire(start.socket, timeout=120) as w:
        w.send({"op": "synthesize", "id": 1, "text": TEXT})
        events = w.until(1)
    assert events[-1]["event"] == "end", events
    assert sum(len(e["audio"]) for e in events if e["event"] == "chunk") > 0


@pytest.mark.parametrize("point", ["reading the config", "warming the voice"])
def test_ctrl_c_during_start_up_stops_at_once_in_one_line(
    tmp_path: Path, cut: Path, point: str
) -> None:
    """Before: Ctrl-C waited for the whole cut (5-10 s), then a 35-line traceback."""
    start = Start(tmp_path, cut)  # nothing is written to it: the session's cache
    try:
        if point == "reading the config":
            start.wait_until(lambda: "malloc arenas" in start.log())
        else:
            start.wait_until(lambda: f"voice {MULTI} loaded" in start.log())
        rc, took, lines = start.interrupt()
    finally:
        if start.proc.poll() is None:
            start.proc.kill()
    _assert_stopped_in_one_line(rc, took, lines)
    assert not os.path.exists(start.socket)


def test_ctrl_c_in_the_middle_of_a_first_cut(tmp_path: Path, cut: Path) -> None:
    """Mid-write of a cut's graph: nothing half-written stays in the cache, and the next
    start cuts the voice again and serves."""
    first = Start(tmp_path / "a", _without_multi(cut, tmp_path / "cache"))
    try:
        # A graph being written (milliseconds each, so looked for without a pause).
        first.wait_until(lambda: bool(first.temp_files()), pause=0.0)
        rc, took, lines = first.interrupt()
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    _assert_stopped_in_one_line(rc, took, lines)
    assert first.temp_files() == []
    slots = [p.parent.name for p in tmp_path.joinpath("cache").rglob("meta.json")]
    assert len(slots) == len(list(cut.rglob("meta.json"))) - 1, slots  # not taken as cut
    again = Start(tmp_path / "b", tmp_path / "cache")
    try:
        _serves(again)
        assert f"preparing {MULTI}" in again.log()  # cut again, from the start
    finally:
        again.proc.send_signal(signal.SIGTERM)
        again.proc.wait(timeout=60)
    assert again.proc.returncode == 0
    assert again.temp_files() == []


def test_ctrl_c_after_the_cut_keeps_it(tmp_path: Path, cut: Path) -> None:
    """The cut was written whole before the signal: the next start uses it."""
    first = Start(tmp_path / "a", _without_multi(cut, tmp_path / "cache"))
    try:
        first.wait_until(lambda: "ready in" in first.log())  # "<voice> ready in N s"
        rc, took, lines = first.interrupt()
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    _assert_stopped_in_one_line(rc, took, lines)
    again = Start(tmp_path / "b", tmp_path / "cache")
    try:
        _serves(again)
        assert f"voice {MULTI}: cached split" in again.log() and "preparing" not in again.log()
    finally:
        again.proc.send_signal(signal.SIGTERM)
        again.proc.wait(timeout=60)


def test_sigterm_during_start_up_stops_at_once(tmp_path: Path, cut: Path) -> None:
    """systemd's stop during start-up: exit 0 at once, as a stop once serving."""
    start = Start(tmp_path, cut)
    try:
        start.wait_until(lambda: f"voice {MULTI} loaded" in start.log())
        t0 = time.monotonic()
        start.proc.send_signal(signal.SIGTERM)
        rc = start.proc.wait(timeout=60)
    finally:
        if start.proc.poll() is None:
            start.proc.kill()
    assert rc == 0 and time.monotonic() - t0 < STOP_BOUND_S, start.log()
    assert "stopped (SIGTERM) while starting" in start.log().splitlines()[-1]


def test_a_sighup_during_start_up_is_a_reload_once_serving(tmp_path: Path, cut: Path) -> None:
    """``systemctl reload`` while the voices load: SIGHUP's default action ended the
    process; now the reload runs once the daemon serves (one while the config is being
    read is ignored; before ``ttsd`` runs at all, Python's own start-up, it still ends it)."""
    start = Start(tmp_path, cut)
    try:
        start.wait_until(lambda: start.log().strip() != "")  # the config is read: logging
        start.proc.send_signal(signal.SIGHUP)
        start.wait_until(lambda: f"voice {MULTI} loaded" in start.log())
        start.proc.send_signal(signal.SIGHUP)
        _serves(start)
        start.wait_until(lambda: "reload: the SIGHUP that came during start-up" in start.log())
        assert start.proc.poll() is None
    finally:
        start.proc.send_signal(signal.SIGTERM)
        start.proc.wait(timeout=60)


# ------------------------------------------------------------------ warm


def test_ping_and_health_say_the_daemon_is_warm(daemon_factory: DaemonFactory, cut: Path) -> None:
    """The first answer comes once a first packet is as quick as any later one (the
    speaker's side: tests/playback/test_speak_daemon.py)."""
    d = daemon_factory(ready=False)
    with Wire(d.socket) as w:
        assert w.call({"op": "ping", "id": 1}) == {"id": 1, "event": "pong", "warm": True}
        health = w.call({"op": "health", "id": 2})
        assert health["warm"] is True and health["starting"] is False, health
        assert health["warm_up"] in ("running", "done"), health  # the rest, in the background
        assert w.call({"op": "info", "id": 3})["warm"] is True


def _first_packets(sock: str, n: int) -> list[dict[str, Any]]:
    """``n`` requests at once, each on its own connection; each one's end stats."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    go = threading.Barrier(n)

    def one(i: int) -> None:
        with Wire(sock, timeout=300) as w:
            go.wait()
            w.send({"op": "synthesize", "id": 1, "text": TEXT})
            end = w.until(1)[-1]
            assert end["event"] == "end", end
            out[i] = end["stats"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_requests_at_socket_up_are_not_held_behind_the_warm_up(
    daemon_factory: DaemonFactory, cut: Path
) -> None:
    """Eight requests the moment the socket accepts: each first packet as quick as eight
    sent later (2x asked; here 3x and 0.3 s, a shared box).  Before, they waited for the
    whole warm-up (a long sentence's windows and whole-sentence decodes, the cost
    measurements): 10x slower.  (Admission is out of the way: a busy shared box measures
    a cost that refuses some of eight; here only the wait is asked about.)"""
    d = daemon_factory(
        {"scheduler": {"admission_max_load": 64.0, "admission_backlog_ms": 0.0}}, ready=False
    )
    cold = [s["ttfp_ms"] for s in _first_packets(d.socket, 8)]
    with Wire(d.socket) as w:
        health = w.call({"op": "health", "id": 1})
    # Served before the rest of the warm-up (it waits while requests are in flight).
    assert health["warm"] is True and health["warm_up"] == "running", health
    time.sleep(1.0)
    warm = [s["ttfp_ms"] for s in _first_packets(d.socket, 8)]
    assert statistics.median(cold) <= 3 * statistics.median(warm) + 300, (cold, warm)
