"""The per-user socket path: another user who squats /tmp/ttsd-UID gets nothing.

The test process plays the attacker (root); tests/ops/victim.py, a fresh interpreter that
drops to an unused uid, plays the victim, with no ``XDG_RUNTIME_DIR`` so that the /tmp
fallback is its default.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")


@dataclass
class Victim:
    uid: int
    home: Path
    """/tmp/ttsd-UID: the victim's fallback directory (absent at the start)."""

    def run(self, action: str, *args: str, timeout: float = 60.0) -> tuple[int, str]:
        """tests/ops/victim.py's ``action`` run as the victim; its exit code and output."""
        env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "TTSD_SOCKET")}
        env["PYTHONPATH"] = str(REPO)
        done = subprocess.run(
            [sys.executable, "-m", "tests.ops.victim", str(self.uid), action, *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        return done.returncode, done.stdout.decode(errors="replace")


@pytest.fixture
def victim() -> Iterator[Victim]:
    while True:
        uid = random.randint(40_000, 59_999)
        home = Path(f"/tmp/ttsd-{uid}")
        if not os.path.lexists(home):
            break
    try:
        yield Victim(uid, home)
    finally:
        if home.is_symlink():
            home.unlink()
        else:
            shutil.rmtree(home, ignore_errors=True)


def _listen(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(8)
    s.setblocking(False)
    os.chmod(path, 0o666)
    return s


def _nobody_connected(listener: socket.socket) -> bool:
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


@pytest.fixture
def attacker_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ttsd-attacker-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("squat", ["owned-by-other", "writable-by-others", "symlink"])
def test_client_refuses_a_squatted_fallback_directory(
    victim: Victim, attacker_dir: Path, squat: str
) -> None:
    if squat == "symlink":
        (attacker_dir / "ttsd").mkdir(mode=0o755)
        victim.home.symlink_to(attacker_dir)
    else:
        victim.home.mkdir()
        (victim.home / "ttsd").mkdir()
        if squat == "writable-by-others":
            # The victim's own directories, but anyone could have planted the socket.
            for d in (victim.home, victim.home / "ttsd"):
                os.chown(d, victim.uid, victim.uid)
                d.chmod(0o777)
        else:
            victim.home.chmod(0o755)
            (victim.home / "ttsd").chmod(0o755)
    listener = _listen(victim.home / "ttsd" / "ttsd.sock")
    try:
        rc, out = victim.run("client-ping")
        assert rc == 3, out
        assert "refused: connect:" in out and "refusing to use it" in out
        rc, out = victim.run("ttsctl-ping")
        assert rc == 1, out
        assert out.startswith("ttsctl: connect: ") and "refusing to use it" in out
        assert _nobody_connected(listener)
    finally:
        listener.close()


def test_client_uses_its_own_fallback_directory(victim: Victim) -> None:
    victim.home.mkdir(mode=0o700)
    (victim.home / "ttsd").mkdir(mode=0o700)
    for d in (victim.home, victim.home / "ttsd"):
        os.chown(d, victim.uid, victim.uid)
    listener = _listen(victim.home / "ttsd" / "ttsd.sock")
    try:
        rc, out = victim.run("client-ping")
        assert rc == 0, out
        assert f"connected to {victim.home}/ttsd/ttsd.sock" in out
    finally:
        listener.close()


def test_daemon_makes_its_fallback_directories_private(victim: Victim) -> None:
    rc, out = victim.run("prepare")
    assert rc == 0, out
    assert out.strip() == f"{victim.home}/ttsd/ttsd.sock"
    for d in (victim.home, victim.home / "ttsd"):
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == victim.uid
        assert stat.S_IMODE(st.st_mode) == 0o700


@pytest.mark.parametrize("squat", ["owned-by-other", "symlink"])
def test_daemon_refuses_a_squatted_fallback_directory(
    victim: Victim, attacker_dir: Path, squat: str
) -> None:
    if squat == "symlink":
        victim.home.symlink_to(attacker_dir)
    else:
        victim.home.mkdir(mode=0o777)
        victim.home.chmod(0o777)  # the victim could even create ttsd/ in it
    config = attacker_dir / "config.yaml"
    config.write_text("playback:\n  enabled: false\n")
    config.chmod(0o644)

    rc, out = victim.run("serve", str(config))
    assert rc == 1, out
    assert "refusing to use it" in out
    assert not (attacker_dir / "ttsd" / "ttsd.sock").exists()
    assert not (victim.home / "ttsd" / "ttsd.sock").exists()
