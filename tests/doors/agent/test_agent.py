"""The agent door through the real daemon and a real socket: HAProxy's agent-check answer,
its bounds (connections, time), who may ask, and the rule off loopback."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from bench.rig import free_port
from tests.conftest import Daemon, DaemonFactory

READY = re.compile(r"^up ready (\d{1,3})% maxconn:(\d+)\n$")


def ask(port: int, timeout: float = 5.0) -> bytes:
    """What a check reads: everything until the door closes (a reset: what came before)."""
    data = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            while chunk := s.recv(256):
                data += chunk
    except ConnectionResetError:
        pass
    return data


@pytest.fixture(scope="module")
def agent_box(daemon_factory: DaemonFactory) -> Iterator[tuple[Daemon, int, int]]:
    agent, http = free_port(), free_port()
    d = daemon_factory(
        {
            "agent": {"listen": f"127.0.0.1:{agent}", "max_connections": 2, "timeout_s": 0.5},
            "http": {"listen": f"127.0.0.1:{http}"},
        }
    )
    yield d, agent, http


def test_an_idle_box_says_ready_with_its_room(agent_box: tuple[Daemon, int, int]) -> None:
    _, agent, http = agent_box
    line = ask(agent).decode("ascii")
    m = READY.match(line)
    assert m, line
    assert int(m.group(1)) == 100 and int(m.group(2)) >= 1, line
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=5) as r:
        body = json.load(r)
    assert r.status == 200 and body["state"] == "ready" and body["weight_pct"] == 100, body
    assert body["max_streams"] == int(m.group(2)), (body, line)


def test_checks_are_bounded_in_number_and_time(agent_box: tuple[Daemon, int, int]) -> None:
    d, agent, _ = agent_box
    held = []
    for _ in range(2):  # two checks that never close: each holds a slot until timeout_s
        s = socket.create_connection(("127.0.0.1", agent), timeout=5)
        assert s.recv(256).startswith(b"up ready")
        held.append(s)
    t0 = time.monotonic()
    assert ask(agent) == b"", "a third check at once must be closed unanswered"
    for s in held:  # closed by the door within its timeout (0.5 s), not by us
        s.settimeout(5)
        try:
            assert s.recv(256) == b""
        except ConnectionResetError:
            pass
        s.close()
    assert time.monotonic() - t0 < 3.0
    assert READY.match(ask(agent).decode("ascii"))  # slots given back
    assert d.alive()


def test_peers_outside_allowed_networks_get_nothing(daemon_factory: DaemonFactory) -> None:
    agent = free_port()
    daemon_factory({"agent": {"listen": f"127.0.0.1:{agent}", "allowed_networks": ["10.9.0.0/16"]}})
    assert ask(agent) == b""


def test_off_loopback_needs_an_allow_list(daemon_factory: DaemonFactory) -> None:
    """The agent protocol carries no key: the HTTP door's rule (a key off loopback) is
    an allow-list of the balancers here, and without one the daemon does not start."""
    agent = free_port()
    with pytest.raises(RuntimeError) as exc:
        daemon_factory({"agent": {"listen": f"0.0.0.0:{agent}"}}, timeout=60)
    assert "agent.allowed_networks" in str(exc.value)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{agent}/", timeout=2)
