"""The per-user socket path: another user who squats /tmp/ttsd-UID gets nothing.

The test process plays the attacker (root); a forked child that drops to an unused uid
plays the victim, with no ``XDG_RUNTIME_DIR`` so that the /tmp fallback is its default.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import socket
import stat
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Everything the victim runs is imported here, as root: the child drops to a uid that may
# not be able to read the interpreter's own files (a Python under /root).
import appliance.ops.logsetup  # noqa: F401
from appliance.clients.client import Client, TtsdError
from appliance.clients.ctl import main as ttsctl_main
from appliance.main import main as ttsd_main
from appliance.ops.paths import default_socket_path, prepare_socket_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")


@dataclass
class Victim:
    uid: int
    home: Path
    """/tmp/ttsd-UID: the victim's fallback directory (absent at the start)."""

    def run(self, fn: Callable[[], int], timeout: float = 60.0) -> tuple[int, str]:
        """``fn()`` in a child running as the victim; its exit code and its output."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            rc = 99
            try:
                os.close(r)
                os.dup2(w, 1)
                os.dup2(w, 2)
                # pytest replaced sys.stdout/err in this process: write to the pipe instead.
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                os.setgroups([])
                os.setgid(self.uid)
                os.setuid(self.uid)
                os.environ.pop("XDG_RUNTIME_DIR", None)
                os.environ.pop("TTSD_SOCKET", None)
                rc = fn()
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)
        os.close(w)
        chunks = []
        with os.fdopen(r, "rb") as f:
            while True:
                ready, _, _ = select.select([f], [], [], timeout)
                if not ready:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    raise TimeoutError(b"".join(chunks).decode(errors="replace"))
                data = os.read(f.fileno(), 65536)
                if not data:
                    break
                chunks.append(data)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


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


def _client_ping() -> int:
    try:
        with Client(timeout=5) as c:
            print("connected to", c.path)
            return 0
    except TtsdError as exc:
        print("refused:", exc)
        return 3


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
        rc, out = victim.run(_client_ping)
        assert rc == 3, out
        assert "refused: connect:" in out and "refusing to use it" in out
        rc, out = victim.run(lambda: ttsctl_main(["ping"]))
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
        rc, out = victim.run(_client_ping)
        assert rc == 0, out
        assert f"connected to {victim.home}/ttsd/ttsd.sock" in out
    finally:
        listener.close()


def test_daemon_makes_its_fallback_directories_private(victim: Victim) -> None:
    def make() -> int:
        path = default_socket_path()
        prepare_socket_dir(path)
        print(path)
        return 0

    rc, out = victim.run(make)
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

    def serve() -> int:
        return ttsd_main(["serve", "--config", str(config)])

    rc, out = victim.run(serve)
    assert rc == 1, out
    assert "refusing to use it" in out
    assert not (attacker_dir / "ttsd" / "ttsd.sock").exists()
    assert not (victim.home / "ttsd" / "ttsd.sock").exists()
