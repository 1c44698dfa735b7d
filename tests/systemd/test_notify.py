"""sd_notify over a real datagram socket, path and abstract namespace."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.ops.notify import Notifier, settle_owed, watchdog_interval_s, watchdog_loop


class Receiver:
    """The service manager's end: a bound AF_UNIX datagram socket."""

    def __init__(self, sock: socket.socket, env_value: str) -> None:
        self.sock = sock
        self.env_value = env_value

    def recv(self, timeout: float = 5.0) -> str:
        self.sock.settimeout(timeout)
        return self.sock.recv(4096).decode()

    def pending(self) -> list[str]:
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                out.append(self.sock.recv(4096).decode())
        except BlockingIOError:
            return out


@pytest.fixture
def path_receiver() -> Iterator[Receiver]:
    # AF_UNIX paths are limited to 108 bytes: keep it short rather than under tmp_path.
    with tempfile.TemporaryDirectory(prefix="ttsd-n-") as d:
        path = os.path.join(d, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        yield Receiver(sock, path)
        sock.close()


@pytest.fixture
def abstract_receiver() -> Iterator[Receiver]:
    name = f"ttsd-test-{os.getpid()}-{os.urandom(4).hex()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    yield Receiver(sock, "@" + name)
    sock.close()


def test_unset_notify_socket_is_a_silent_no_op() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.ready() is False
    assert n.watchdog() is False


def test_non_socket_address_is_ignored() -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not n.enabled


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_each_message_arrives_as_one_datagram(
    kind: str, path_receiver: Receiver, abstract_receiver: Receiver
) -> None:
    rx = path_receiver if kind == "path" else abstract_receiver
    n = Notifier.from_env({"NOTIFY_SOCKET": rx.env_value})
    assert n.enabled
    assert n.ready(status="backend=onnx-cpu voices=1")
    assert rx.recv() == "READY=1\nSTATUS=backend=onnx-cpu voices=1"
    assert n.status("served 3")
    assert rx.recv() == "STATUS=served 3"
    assert n.watchdog()
    assert rx.recv() == "WATCHDOG=1"
    assert n.extend_timeout(30_000_000)
    assert rx.recv() == "EXTEND_TIMEOUT_USEC=30000000"
    assert n.reloading()
    reload_msg = rx.recv().split("\n")
    assert reload_msg[0] == "RELOADING=1"
    assert reload_msg[1].startswith("MONOTONIC_USEC=") and int(reload_msg[1].split("=")[1]) > 0
    assert n.stopping()
    assert rx.recv() == "STOPPING=1"
    n.close()
    assert not n.enabled


def test_newline_in_a_value_cannot_forge_a_field(path_receiver: Receiver) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": path_receiver.env_value})
    n.status("ok\nREADY=1")
    assert path_receiver.recv() == "STATUS=ok READY=1"


def test_gone_manager_is_logged_once_not_raised(
    path_receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": path_receiver.env_value})
    Path(path_receiver.env_value).unlink()
    with caplog.at_level(logging.WARNING, logger="appliance.ops.notify"):
        assert n.watchdog() is False
        assert n.watchdog() is False
    assert len([r for r in caplog.records if "sd_notify" in r.message]) == 1


def test_full_receive_queue_never_blocks_the_sender(path_receiver: Receiver) -> None:
    # Nobody reads: the kernel queue fills (net.unix.max_dgram_qlen), then sends must fail fast.
    n = Notifier.from_env({"NOTIFY_SOCKET": path_receiver.env_value})
    results: list[bool] = []
    sender = threading.Thread(target=lambda: results.extend(n.watchdog() for _ in range(2000)))
    sender.start()
    sender.join(timeout=20)
    assert not sender.is_alive(), "sd_notify blocked on a full receive queue"
    assert results[0] is True
    assert False in results


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "10000000"}) == 5.0
    pid = str(os.getpid())
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": pid}) == 1.0
    # Meant for another process (inherited): not ours to ping.
    other = str(os.getpid() + 1)
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": other}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "soon"}) is None


async def test_watchdog_pings_only_while_the_heartbeat_is_fresh(path_receiver: Receiver) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": path_receiver.env_value})
    # Fresh for 3 rounds, stale for 3 (a wedged worker), fresh again for 3.
    answers = [True] * 3 + [False] * 3 + [True] * 3
    done = asyncio.Event()

    def fresh() -> bool:
        if not answers:
            done.set()
            return True
        return answers.pop(0)

    task = asyncio.create_task(watchdog_loop(n, 0.0, fresh))
    await asyncio.wait_for(done.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    got = path_receiver.pending()
    assert got[:3] == ["WATCHDOG=1"] * 3
    assert got[3].startswith("STATUS=") and "stalled" in got[3]
    assert got[4:] == ["WATCHDOG=1"] * (len(got) - 4)
    assert len(got) >= 7


def fill(n: Notifier) -> None:
    """Pings until the manager's queue is full (nobody reads it)."""
    for _ in range(100_000):
        if not n.watchdog():
            return
    raise AssertionError("the receive queue never filled")


def test_a_state_change_meeting_a_full_queue_goes_first_with_the_next_message(
    path_receiver: Receiver,
) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": path_receiver.env_value})
    fill(n)
    assert n.owed == 0  # a ping is expendable
    assert n.ready(status="warm") is False
    assert n.owed == 1
    before = path_receiver.pending()  # the manager reads its queue at last
    assert before and all(m == "WATCHDOG=1" for m in before)
    assert n.watchdog()
    assert n.owed == 0
    assert path_receiver.pending() == ["READY=1\nSTATUS=warm", "WATCHDOG=1"]


async def test_settle_owed_sends_it_where_no_ping_would(path_receiver: Receiver) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": path_receiver.env_value})
    fill(n)
    assert n.stopping() is False
    settling = asyncio.create_task(settle_owed(n, interval_s=0.02))
    await asyncio.sleep(0.1)
    assert not settling.done()  # still full: still owed
    path_receiver.pending()
    await asyncio.wait_for(settling, timeout=5)
    assert path_receiver.pending() == ["STOPPING=1"]
