"""ALSA's own messages stay out of the terminal (issue 42: ``make run`` printed
``ALSA lib pcm.c:8570:(snd_pcm_recover) underrun occurred`` at each underrun of a busy
start-up): they go to the daemon's log at debug level and are counted in ``stats``."""

from __future__ import annotations

import os
import signal
import time

from bench.pulsesink import PulseServer
from tests.conftest import DaemonFactory
from tests.wire import Wire


def test_underruns_are_not_printed_by_alsa(
    pulse_server: PulseServer, daemon_factory: DaemonFactory
) -> None:
    pulse_server.launch()
    daemon = daemon_factory(
        {"playback": {"enabled": True, "latency": 0.02, "sample_rate": pulse_server.rate}},
        env=pulse_server.env,
    )
    with Wire(daemon.socket) as w:
        before = w.call({"op": "stats", "id": 1})["playback"]
    for _ in range(3):  # the whole daemon stopped: its output stream runs dry
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        time.sleep(0.4)
        os.kill(daemon.proc.pid, signal.SIGCONT)
        time.sleep(0.6)
    with Wire(daemon.socket) as w:
        after = w.call({"op": "stats", "id": 2})["playback"]
    assert after["alsa_messages"] > before["alsa_messages"], (before, after)
    assert "ALSA lib" not in daemon.log() and "underrun occurred" not in daemon.log()
