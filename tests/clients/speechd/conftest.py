"""Fixtures: ``sd_ttsd`` on a pipe, connected to the shared real daemon."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.pulsesink import PulseServer, PulseUnavailable
from tests.clients.speechd.modpipe import ModulePipe
from tests.clients.speechd.spd import SpeechdServer, SpeechdUnavailable
from tests.conftest import Daemon


@pytest.fixture
def module(daemon: Daemon, tmp_path: Path) -> Iterator[ModulePipe]:
    """An initialised module (INIT, AUDIO server, LOGLEVEL done), as the server leaves it."""
    pipe = ModulePipe(daemon.socket, tmp_path)
    try:
        pipe.init()
        yield pipe
    finally:
        pipe.quit()


# Module scope: torn down after the speech-dispatcher tests, so the shared daemon does not
# keep their connection while other tests look at it.
@pytest.fixture(scope="module")
def speechd_pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseServer]:
    try:
        server = PulseServer.start(Path(tmp_path_factory.mktemp("spd-pulse")))
    except PulseUnavailable as exc:
        # Never a skip: CI installs PulseAudio, and a silent skip would hide that.
        pytest.fail(f"the speech-dispatcher tests need a PulseAudio null sink: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def speechd(
    daemon: Daemon, speechd_pulse: PulseServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SpeechdServer]:
    """A private speech-dispatcher whose default module is sd_ttsd on the shared daemon."""
    try:
        server = SpeechdServer.start(
            Path(tmp_path_factory.mktemp("speechd")), daemon.socket, speechd_pulse.env
        )
    except SpeechdUnavailable as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()
