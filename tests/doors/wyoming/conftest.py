"""Daemons with a Wyoming door: one on loopback TCP (port 0: the log says which), one on a
Unix socket."""

from __future__ import annotations

import pytest

from tests.conftest import Daemon, DaemonFactory
from tests.doors.wyoming.wyoming_helpers import wyoming_uri


@pytest.fixture(scope="session")
def wy_daemon(daemon_factory: DaemonFactory) -> Daemon:
    return daemon_factory(
        {
            "wyoming": {"uri": "tcp://127.0.0.1:0", "allowed_networks": ["127.0.0.1/32"]},
            "limits": {
                "max_text_chars": 2000,
                "max_connections_per_uid": 12,
                "frame_timeout_s": 1.0,
            },
            # These tests are about the door: admission is tested on its own daemon.
            "scheduler": {"admission_max_load": 8.0, "admission_backlog_ms": 600000},
        }
    )


@pytest.fixture(scope="session")
def wy_uri(wy_daemon: Daemon) -> str:
    return wyoming_uri(wy_daemon)


@pytest.fixture(scope="session")
def wy_unix_daemon(
    daemon_factory: DaemonFactory, tmp_path_factory: pytest.TempPathFactory
) -> Daemon:
    path = tmp_path_factory.mktemp("wyoming") / "wyoming.sock"
    return daemon_factory({}, args=["--wyoming", f"unix://{path}"])


@pytest.fixture(scope="session")
def wy_unix_uri(wy_unix_daemon: Daemon) -> str:
    return wyoming_uri(wy_unix_daemon)
