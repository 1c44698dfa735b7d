"""Fixtures: ``sd_ttsd`` on a pipe, connected to the shared real daemon."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon
from tests.speechd.modpipe import ModulePipe


@pytest.fixture
def module(daemon: Daemon, tmp_path: Path) -> Iterator[ModulePipe]:
    """An initialised module (INIT, AUDIO server, LOGLEVEL done), as the server leaves it."""
    pipe = ModulePipe(daemon.socket, tmp_path)
    try:
        pipe.init()
        yield pipe
    finally:
        pipe.quit()
