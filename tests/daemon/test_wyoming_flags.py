"""``ttsd serve --wyoming`` beyond loopback: the start-up warning when only loopback may
connect, and ``--wyoming-allow`` setting who may (wyoming.allowed_networks)."""

from __future__ import annotations

import asyncio
import re
import time

from tests.conftest import Daemon, DaemonFactory
from tests.doors.wyoming.wyoming_helpers import parse_events, raw_exchange

ONLY_HERE = "admits only this host"


def _port(daemon: Daemon, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while not (m := re.search(r"wyoming: listening on tcp://\S+:(\d+)", daemon.log())):
        assert time.monotonic() < deadline, daemon.log()[-3000:]
        time.sleep(0.05)
    return int(m.group(1))


def _describe_from_loopback(port: int) -> list[dict[str, object]]:
    got, _closed = asyncio.run(raw_exchange(f"tcp://127.0.0.1:{port}", b'{"type": "describe"}\n'))
    return parse_events(got)


def test_a_wyoming_listener_other_hosts_reach_says_who_may_connect(
    daemon_factory: DaemonFactory,
) -> None:
    """The README's line (`--wyoming tcp://0.0.0.0:10200`) admitted only loopback peers,
    and the log said nothing: Home Assistant on another host was refused in silence."""
    d = daemon_factory(args=["--wyoming", "tcp://0.0.0.0:0"])
    port = _port(d)
    line = next(ln for ln in d.log().splitlines() if ONLY_HERE in ln)
    assert "WARNING" in line and "wyoming.allowed_networks (127.0.0.0/8, ::1/128)" in line
    assert "--wyoming-allow" in line
    assert _describe_from_loopback(port)[0]["type"] == "info"


def test_wyoming_allow_sets_the_allowed_networks(daemon_factory: DaemonFactory) -> None:
    # A documentation network only: this host is then not among the allowed.
    d = daemon_factory(args=["--wyoming", "tcp://0.0.0.0:0", "--wyoming-allow", "192.0.2.0/24"])
    port = _port(d)
    assert ONLY_HERE not in d.log()
    assert "wyoming: clients from 192.0.2.0/24 may connect" in d.log()
    events = _describe_from_loopback(port)
    assert events[0]["type"] == "error" and events[0]["data"]["code"] == "unauthorized", events
