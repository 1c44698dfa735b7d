"""``make run`` with a speaker (the null sink): the demo greets once ``ping`` says the
daemon is warm, so the greeting is not held while the device opens (issue 42: sent at
the first ``ping``, its first sound came 573-1627 ms late; "the device was still
opening")."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from bench.pulsesink import PulseServer
from tests.clients.demorig import Demo
from tests.wire import Wire

STALL_S = 4.0
"""How long the sound server is held (SIGSTOP) after the daemon listens: its device opens
no sooner."""


def test_the_greeting_waits_for_the_speaker_not_in_the_daemon(
    pulse_server: PulseServer, bundled_cut: Path, tmp_path: Path
) -> None:
    pulse_server.launch()
    assert pulse_server.proc is not None
    pid = pulse_server.proc.pid
    os.kill(pid, signal.SIGSTOP)  # the device cannot open until it runs again
    demo = Demo(
        tmp_path,
        bundled_cut,
        playback={"enabled": True, "latency": 0.02, "sample_rate": pulse_server.rate},
        sound_env=pulse_server.env,
    )
    try:
        sock = demo.socket()
        deadline = time.monotonic() + 300
        while True:  # listening, its voices warm, its speaker still starting
            try:
                with Wire(sock, timeout=30) as w:
                    pong = w.call({"op": "ping", "id": 1})
                break
            except OSError:
                assert time.monotonic() < deadline, demo.output()
                time.sleep(0.05)
        assert pong["warm"] is False, pong
        time.sleep(STALL_S)
        os.kill(pid, signal.SIGCONT)
        demo.wait_for("ttsd: try")
        out = demo.output()
        assert "speaking the greeting" in out, out
        hint = next(line for line in demo.lines if "ttsd: try" in line)
        assert "say 'hello'" in hint, hint
        # The daemon's own account of the greeting: from its arrival to its first packet
        # (time waiting for the speaker included), well under the stall.
        demo.wait_for("ttsd.request:")
        ttfp = float(re.findall(r"ttfp_ms=([\d.]+)", out + demo.output())[0])
        assert ttfp < 1000 * STALL_S / 2, demo.output()
        rc, _took, _after = demo.ctrl_c()
        assert rc == 130, demo.output()
    finally:
        os.kill(pid, signal.SIGCONT)
        demo.stop()
