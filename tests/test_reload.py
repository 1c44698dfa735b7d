"""SIGHUP reload on the real daemon: parsed off the event loop, one at a time."""

from __future__ import annotations

import signal
import time

from appliance.config import MAX_CONFIG_BYTES
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire


def _ping_s(w: Wire, rid: int) -> float:
    start = time.monotonic()
    ev = w.call({"op": "ping", "id": rid})
    assert ev["event"] == "pong", ev
    return time.monotonic() - start


def _slow_config(base: str) -> str:
    """The daemon's own config plus a list of ~125 000 uids that ends in a wrong type: seconds
    of pure-Python YAML parsing, then refused."""
    uids = ", ".join(str(100_000 + i) for i in range(125_000))
    text = f"{base}server:\n  allowed_uids: [{uids}, x]\n"
    assert len(text.encode()) < MAX_CONFIG_BYTES
    return text


def _wait_for(daemon: Daemon, text: str, count: int = 1, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while daemon.log().count(text) < count:
        assert daemon.alive(), daemon.log()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} x{count} in:\n{daemon.log()[-3000:]}"
        time.sleep(0.05)


def test_reload_parses_off_the_loop_and_one_at_a_time(daemon_factory: DaemonFactory) -> None:
    daemon = daemon_factory()
    base = daemon.config_path.read_text()
    refused = "reload refused:"
    with Wire(daemon.socket) as w:
        baseline = max(_ping_s(w, i) for i in range(1, 6))

        daemon.config_path.write_text(_slow_config(base))
        daemon.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)  # the handler has run: an old daemon is now stuck in the parser
        # More SIGHUPs while parsing: folded into one more reload, not run side by side.
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.proc.send_signal(signal.SIGHUP)
        during = _ping_s(w, 10)
        print(f"ping: baseline {baseline * 1000:.1f} ms, during the reload {during * 1000:.1f} ms")
        refusals_at_pong = daemon.log().count(refused)
        _wait_for(daemon, refused, count=2)
        time.sleep(1.0)  # a third reload would have started by now

        log = daemon.log()
        assert refusals_at_pong == 0, "the ping waited for the parse: the loop was blocked"
        assert during < max(1.0, 20 * baseline), (during, baseline)
        assert log.count(refused) == 2
        # (Two SIGHUPs sent back to back may reach the process as one: signals do not queue.)
        assert log.count("already reloading") >= 1
        assert "allowed_uids[125000]: expected an integer, got 'x'" in log

        # A good file after that is applied, and the daemon still answers.
        daemon.config_path.write_text(f"{base}server:\n  max_text_chars: 1234\n")
        daemon.proc.send_signal(signal.SIGHUP)
        _wait_for(daemon, "reloaded: server.max_text_chars")
        assert _ping_s(w, 20) < 30
    assert daemon.alive()
