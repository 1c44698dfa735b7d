"""The module's ``ttsd.conf`` as shipped names no socket, so a user's own daemon is found:
the module looks where ``ttsctl`` does ($TTSD_SOCKET, then the per-user socket, then the
system service's).  Before, the file named /run/ttsd/ttsd.sock uncommented, against its own
comment: with a per-user daemon the module failed its INIT and ``spd-say -O`` left ttsd out,
saying nothing.

(The daemon here runs as root, whose default socket is the system one, so the test points
the lookup at it with $TTSD_SOCKET in speech-dispatcher's environment, as a user's session
may; the per-user default itself is appliance.ops.paths', tested in tests/ops/test_paths.py.
Running the whole thing as another user is not possible here: the interpreter lives under
/root.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.client import Client
from appliance.clients.speechd.config import load
from bench.pulsesink import PulseServer
from tests.clients.speechd.spd import SpeechdServer, SpeechdUnavailable
from tests.conftest import REPO, Daemon

SHIPPED = REPO / "speechd/ttsd.conf"


def test_the_shipped_conf_names_no_socket() -> None:
    assert load(SHIPPED).socket is None


def test_spd_say_finds_ttsd_through_the_shipped_conf(
    daemon: Daemon, speechd_pulse: PulseServer, tmp_path: Path
) -> None:
    try:
        server = SpeechdServer.start(
            tmp_path / "speechd",
            daemon.socket,
            speechd_pulse.env,
            module_conf=SHIPPED.read_text(),
            env={"TTSD_SOCKET": daemon.socket},
        )
    except SpeechdUnavailable as exc:
        pytest.fail(str(exc))
    try:
        with Client(daemon.socket) as c:
            before = c.request("stats")["counters"]["requests_completed"]
        modules = server.spd_say("-O")
        assert "ttsd" in modules.stdout.split(), (modules.stdout, server.module_log()[-2000:])
        said = server.spd_say("-o", "ttsd", "-w", "Found as shipped.", timeout=120)
        assert said.returncode == 0, said.stderr
        assert f"at {daemon.socket}" in server.module_log()
        with Client(daemon.socket) as c:
            assert c.request("stats")["counters"]["requests_completed"] > before
    finally:
        server.stop()
