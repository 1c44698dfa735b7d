"""SIGHUP reload on the real daemon: parsed off the event loop, one at a time."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from appliance.ops.config import MAX_CONFIG_BYTES
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire


def _ping_s(w: Wire, rid: int) -> float:
    start = time.monotonic()
    ev = w.call({"op": "ping", "id": rid})
    assert ev["event"] == "pong", ev
    return time.monotonic() - start


def _slow_config(base: str) -> str:
    """The daemon's own config plus a list of 50 000 uids that ends in a wrong type: a second
    or more of pure-Python YAML parsing, then refused.  (125 000 took over the reload's
    30 s read deadline on a loaded 2-core box, and the second reload found the first's
    read still stuck.)"""
    uids = ", ".join(str(100_000 + i) for i in range(50_000))
    text = f"{base}v1:\n  allowed_uids: [{uids}, x]\n"
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
        assert "allowed_uids[50000]: expected an integer, got 'x'" in log

        # A good file after that is applied, and the daemon still answers.
        daemon.config_path.write_text(f"{base}limits:\n  max_text_chars: 1234\n")
        daemon.proc.send_signal(signal.SIGHUP)
        _wait_for(daemon, "reloaded: limits.max_text_chars")
        assert _ping_s(w, 20) < 30
    assert daemon.alive()


def _no_traceback(log: str) -> None:
    assert "Traceback" not in log and "never retrieved" not in log, log[-3000:]


def test_a_lexicon_nested_too_deep_stops_the_start_in_one_line(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    lexicon = tmp_path / "lexicon.yaml"
    lexicon.write_text("en:\n  a:\n    " + "- " * 5000 + "x\n")
    with pytest.raises(RuntimeError, match="daemon exited with 1") as exc:
        daemon_factory({"voices": {"lexicon": str(lexicon)}})
    log = str(exc.value)
    assert f"lexicon: {lexicon}: nested deeper than 32 levels (line 3" in log
    _no_traceback(log)  # a RecursionError traceback before


@pytest.mark.timeout(300)
def test_lexicon_reloads_refuse_in_one_line_and_never_wedge(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    lexicon = tmp_path / "lexicon.yaml"
    lexicon.write_text("en:\n  Nguyen: win\n")
    daemon = daemon_factory({"voices": {"lexicon": str(lexicon)}})
    base = daemon.config_path.read_text()
    refused = "lexicon reload refused, keeping the old one:"

    def reload(count: int) -> None:
        daemon.proc.send_signal(signal.SIGHUP)
        _wait_for(daemon, refused, count=count, timeout=60)

    # Nested 5 000 deep: before, "Task exception was never retrieved" and nothing else.
    lexicon.write_text("en:\n  a:\n    " + "- " * 5000 + "x\n")
    reload(1)
    assert f"{refused} {lexicon}: nested deeper than 32 levels" in daemon.log()
    # A FIFO: before, the read waited for a writer for ever and every later reload with it.
    lexicon.unlink()
    os.mkfifo(lexicon)
    reload(2)
    assert f"{refused} {lexicon}: cannot read: not a regular file" in daemon.log()
    # Too slow to read (a hung file system stands for this): given up after the timeout.
    lexicon.unlink()
    lexicon.write_text("en:\n" + "".join(f'  w{i}: "{"x" * 28}"\n' for i in range(9_999)))
    daemon.config_path.write_text(base.replace("voices:", "voices:\n  lexicon_timeout_s: 0.1", 1))
    reload(3)
    assert f"{refused} {lexicon}: not read within 0.1 s" in daemon.log()
    # The next good file is read once the slow read above has returned (~1 s here, longer
    # on a busy box; until then a reload says so and keeps the old lexicon): nothing is
    # wedged.  Sent again each second, as an operator would.
    daemon.config_path.write_text(base)
    lexicon.write_text("en:\n  Nguyen: win\n  ttsd: tee tee ess dee\n")
    deadline = time.monotonic() + 60
    while f"lexicon: 2 entries from {lexicon}" not in daemon.log():
        assert time.monotonic() < deadline, daemon.log()[-3000:]
        daemon.proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
    with Wire(daemon.socket) as w:
        assert w.call({"op": "ping", "id": 1})["event"] == "pong"
    _no_traceback(daemon.log())


@pytest.mark.timeout(120)
def test_sigterm_stops_the_daemon_after_a_lexicon_reload_from_a_fifo(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The read of a FIFO waited for a writer in an executor thread, and asyncio joins
    those at exit: SIGTERM never stopped the daemon."""
    lexicon = tmp_path / "lexicon.yaml"
    lexicon.write_text("en:\n  Nguyen: win\n")
    daemon = daemon_factory({"voices": {"lexicon": str(lexicon)}})
    lexicon.unlink()
    os.mkfifo(lexicon)
    daemon.proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    t0 = time.monotonic()
    assert daemon.stop(timeout=20) == 0
    assert time.monotonic() - t0 < 10
    _no_traceback(daemon.log())


def test_a_reload_sees_no_change_in_what_flags_set_and_the_ready_line_names_the_pid(
    daemon_factory: DaemonFactory,
) -> None:
    """``--http`` and ``--wyoming`` are a layer over the file, laid over it again on every
    reload: before, each SIGHUP said ``http.listen`` and ``wyoming.uri`` changed."""
    args = ["--http", "127.0.0.1:0", "--wyoming", "tcp://127.0.0.1:0"]
    daemon = daemon_factory(args=args)
    _wait_for(daemon, "ready: ")
    os.kill(daemon.proc.pid, signal.SIGHUP)
    _wait_for(daemon, "reload: nothing to change live")
    base = daemon.config_path.read_text()
    daemon.config_path.write_text(f"{base}limits:\n  max_text_chars: 1234\n")
    os.kill(daemon.proc.pid, signal.SIGHUP)
    _wait_for(daemon, "reloaded: limits.max_text_chars")
    assert "needs a restart" not in daemon.log(), daemon.log()[-3000:]
    with Wire(daemon.socket) as w:
        ev = w.call({"op": "synthesize", "id": 1, "text": "x" * 1235})
        assert ev["event"] == "error" and ev["code"] == "text_too_long", ev
    # The pid a SIGHUP goes to (`pidof ttsd` finds no process: the daemon is python).
    assert f"ready: pid={daemon.proc.pid} " in daemon.log()
