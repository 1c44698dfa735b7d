"""Socket activation: a listening socket handed over as fd 3, as systemd does it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest
from service_helpers import activated_command

from appliance.ops.activation import ActivationError, activated_unix_listener, listen_fds
from tests.conftest import REPO

# The child: adopt the passed sockets, report what it saw, serve one connection.
CHILD = r"""
import os, sys
from appliance.ops.activation import activated_unix_listener, listen_fds
socks = listen_fds()
left = sorted(k for k in os.environ if k.startswith("LISTEN_"))
print(len(socks), ",".join(left) or "-", flush=True)
sock = activated_unix_listener(socks)
if sock is None:
    sys.exit(3)
conn, _ = sock.accept()
conn.sendall(b"served by fd %d cloexec=%d" % (sock.fileno(), not os.get_inheritable(sock.fileno())))
conn.close()
"""


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, str]]:
    with tempfile.TemporaryDirectory(prefix="ttsd-a-") as d:
        path = os.path.join(d, "ttsd.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen(8)
        yield sock, path
        sock.close()


def _spawn(fd: int, env: dict[str, str], pid_is_child: bool = True) -> subprocess.Popen[str]:
    return subprocess.Popen(
        activated_command(fd, [sys.executable, "-c", CHILD], pid_is_child),
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        pass_fds=(fd,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_passed_socket_is_served_and_env_cleared(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    proc = _spawn(sock.fileno(), {"LISTEN_FDS": "1", "LISTEN_FDNAMES": "ttsd.socket"})
    assert proc.stdout is not None
    assert proc.stdout.readline().split() == ["1", "-"]
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(20)
    client.connect(path)
    assert client.recv(100) == b"served by fd 3 cloexec=1"
    client.close()
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_sockets_meant_for_another_process_are_left_alone(
    listener: tuple[socket.socket, str],
) -> None:
    sock, _path = listener
    proc = _spawn(sock.fileno(), {"LISTEN_FDS": "1", "LISTEN_PID": "1"}, pid_is_child=False)
    out, err = proc.communicate(timeout=20)
    assert out.split() == ["0", "-"], err
    assert proc.returncode == 3


def test_not_activated_without_listen_pid() -> None:
    env = {"LISTEN_FDS": "1"}
    assert listen_fds(env) == []
    assert env == {}


def test_listener_must_be_one_unix_stream_socket() -> None:
    assert activated_unix_listener([]) is None
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    a, b = socket.socketpair()
    try:
        with pytest.raises(ActivationError, match="AF_UNIX/SOCK_DGRAM"):
            activated_unix_listener([dgram])
        with pytest.raises(ActivationError, match="one activated socket, got 2"):
            activated_unix_listener([a, b])
        assert activated_unix_listener([a]) is a
    finally:
        for s in (dgram, a, b):
            s.close()
