"""One daemon with the WebSocket on its HTTP listener for the real clients' tests."""

from __future__ import annotations

import pytest

from tests.conftest import DaemonFactory
from tests.doors.http.conftest import HttpDaemon, start_http


@pytest.fixture(scope="session")
def ws_daemon(daemon_factory: DaemonFactory) -> HttpDaemon:
    return start_http(daemon_factory)
