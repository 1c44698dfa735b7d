"""``speak`` through the real daemon to a PulseAudio null sink, recorded with parec."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
import soxr

from bench.pulsesink import PulseServer
from tests.conftest import Daemon, DaemonFactory
from tests.playback.audio import piecewise_match
from tests.wire import Wire

CTL = [sys.executable, "-m", "appliance.clients.ctl"]
TEXT = "The kitchen door is open. Please close it."
LONG = "This announcement keeps going for quite a while so that it can be interrupted. " * 4


def _speak(w: Wire, rid: int, text: str, **opts: Any) -> None:
    w.send({"op": "speak", "id": rid, "text": text, **opts})


def _wait_health(w: Wire, status: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        h = w.call({"op": "health", "id": 999})
        if h["status"] == status:
            return h
        assert time.monotonic() < deadline, h
        time.sleep(0.2)


def test_speak_events_and_audio_at_the_sink(
    speaker_daemon: Daemon, pulse_server: PulseServer
) -> None:
    with Wire(speaker_daemon.socket) as w:
        _wait_health(w, "ok")
        w.send(
            {
                "op": "synthesize",
                "id": 1,
                "text": TEXT,
                "format": "f32le",
                "noise_scale": 0,
                "noise_w": 0,
            }
        )
        ref = np.concatenate(
            [np.frombuffer(e["audio"], dtype="<f4") for e in w.until(1) if e["event"] == "chunk"]
        )
        with pulse_server.record() as rec:
            _speak(w, 2, TEXT, noise_scale=0, noise_w=0)
            evs = w.until(2)
            time.sleep(0.3)
            recording = rec.samples()
    kinds = [e["event"] for e in evs]
    assert kinds == ["queued", "started", "end"], evs
    assert evs[1]["latency_ms"] > 0
    assert evs[2]["cancelled"] is False and evs[2]["interrupted"] is False
    ref48 = soxr.resample(ref, 22050, pulse_server.rate).astype(np.float32)
    match = piecewise_match(recording, ref48, pulse_server.rate)
    # A sound-server underrun may shift part of it: every loud window matches in its piece.
    assert min(match.scores) >= 0.9 and match.fidelity >= 0.9, match


def test_text_is_cut_by_a_newer_message_and_stop_silences(speaker_daemon: Daemon) -> None:
    with Wire(speaker_daemon.socket) as w:
        _wait_health(w, "ok")
        _speak(w, 1, LONG, priority="text")
        assert w.until(1, ("started",))[-1]["event"] == "started"
        _speak(w, 2, "Important news.", priority="message")
        first = w.until(1)[-1]
        assert first["event"] == "end" and first["interrupted"] is True
        assert w.until(2)[-1]["event"] == "end"
        _speak(w, 3, LONG)
        assert w.until(3, ("started",))[-1]["event"] == "started"
        assert w.call({"op": "stop", "id": 4})["event"] == "ok"
        end = w.until(3)[-1]
        assert end["event"] == "end" and end["cancelled"] is True
        _speak(w, 5, LONG)
        w.until(5, ("queued",))
        w.send({"op": "cancel", "id": 6, "target": 5})
        end = w.until(5)[-1]
        assert end["event"] == "end" and end["cancelled"] is True


def test_ttsctl_say_wait(speaker_daemon: Daemon) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "appliance.clients.ctl",
            "--socket",
            speaker_daemon.socket,
            "say",
            "Hello.",
            "--wait",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "speaking" in r.stdout and "done" in r.stdout


def _results(daemon: Daemon) -> list[str]:
    """The request log's results for speech (``speak`` goes through protocol v1)."""
    return re.findall(r"frontend=protocol-v1 .* result=(\S+)", daemon.log())


def _wait_result(daemon: Daemon, count: int, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while len(got := _results(daemon)) < count:
        assert time.monotonic() < deadline, got
        time.sleep(0.1)
    return got[count - 1]


def test_ttsctl_say_is_spoken_after_ttsctl_has_exited(
    speaker_daemon: Daemon, pulse_server: PulseServer
) -> None:
    """Issue 32, item 10: ``ttsctl say TEXT`` (the README's example) prints "queued" and
    exits; the daemon used to cancel speech whose client had gone (result=cancelled, the
    sink recorded silence).  Speech on the device outlives its client."""
    with Wire(speaker_daemon.socket) as w:
        _wait_health(w, "ok")
    seen = len(_results(speaker_daemon))
    with pulse_server.record() as rec:
        r = subprocess.run(
            [*CTL, "--socket", speaker_daemon.socket, "say", TEXT],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert "queued" in r.stdout
        result = _wait_result(speaker_daemon, seen + 1)
        time.sleep(0.3)
        recording = rec.samples()
    assert result == "done", result
    loud = np.abs(recording) > 0.02
    assert loud.sum() > 0.5 * pulse_server.rate, "the sink recorded (almost) silence"


def test_a_speak_text_stream_left_open_speaks_what_it_has(speaker_daemon: Daemon) -> None:
    """A client that disconnects without ``finish``: its speak text stream ends with the
    text it has and is spoken (as on a half-close); its synthesize requests are cancelled
    (no one is left to take their audio)."""
    seen = len(_results(speaker_daemon))
    w = Wire(speaker_daemon.socket)
    _speak(w, 1, "The kitchen door is open", text_stream=True)
    w.send({"op": "synthesize", "id": 2, "text": LONG})
    assert w.until(1, ("queued",))[-1]["event"] == "queued"
    w.until(2, ("chunk",))
    w.close()
    _wait_result(speaker_daemon, seen + 2)
    results = _results(speaker_daemon)[seen:]
    assert results.count("done") == 1, results  # the speak
    # the synthesize: cancelled, or its send failed first (the request log says which)
    assert any(r == "cancelled" or r.startswith("door:") for r in results), results


def test_pulseaudio_killed_mid_utterance(speaker_daemon: Daemon, pulse_server: PulseServer) -> None:
    with Wire(speaker_daemon.socket) as w:
        _wait_health(w, "ok")
        _speak(w, 1, LONG)
        w.until(1, ("started",))
        pulse_server.kill()
        last = w.until(1)[-1]
        assert last["event"] in ("end", "error")
        if last["event"] == "error":
            assert last["code"] == "no_audio_device"
        h = _wait_health(w, "degraded")
        assert h["playback"]["state"] != "ok"
        _speak(w, 2, "Anyone there?")
        err = w.until(2)[-1]
        assert err["event"] == "error" and err["code"] == "no_audio_device"
        # synthesize is unaffected
        w.send({"op": "synthesize", "id": 3, "text": "Still synthesizing."})
        assert w.until(3)[-1]["event"] == "end"
        pulse_server.launch()
        _wait_health(w, "ok", timeout=60)
        _speak(w, 4, "Back again.")
        assert [e["event"] for e in w.until(4)] == ["queued", "started", "end"]
    assert speaker_daemon.alive()


def _wait_log(daemon: Daemon, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in daemon.log():
        assert daemon.alive() and time.monotonic() < deadline, daemon.log()[-3000:]
        time.sleep(0.02)


# Alone: beside the other test process the stream once did not run steadily within the
# daemon's 6 s start-up wait (it says ready then anyway, with a warning), and this asserts
# it did.
@pytest.mark.solo
def test_the_first_speak_after_readiness_is_as_quick_as_any(
    pulse_server: PulseServer, daemon_factory: DaemonFactory
) -> None:
    """Through ALSA's pulse plugin the stream calls back five times, then sits ~1.9 s: the
    daemon said ready in that pause, and its first speak came 0.4-1.6 s late."""
    pulse_server.launch()
    daemon = daemon_factory(
        {"playback": {"enabled": True, "latency": 0.02, "sample_rate": pulse_server.rate}},
        env=pulse_server.env,
    )
    _wait_log(daemon, "ttsd: ready:")  # logged with READY=1
    with Wire(daemon.socket) as w:
        h = w.call({"op": "health", "id": 1})
        assert h["playback"]["state"] == "ok" and h["playback"]["flowing"] is True, str(h)
        assert h.get("starting") is not True, h
        late = []
        for rid in (2, 3):
            _speak(w, rid, TEXT)
            evs = w.until(rid)
            assert [e["event"] for e in evs] == ["queued", "started", "end"], evs
            late.append(evs[1]["latency_ms"] - evs[2]["stats"]["ttfp_ms"])
    # Each first sound within the first packet + 30 ms (generous here: a shared machine).
    assert max(late) < 150, late


def test_requests_are_served_while_the_speaker_is_still_starting(
    pulse_server: PulseServer, daemon_factory: DaemonFactory
) -> None:
    """The device was opened before the socket listened: with a sound server that does not
    answer, nothing was served at all (probing a missing one cost 2.1 s of the start)."""
    pulse_server.launch()
    assert pulse_server.proc is not None
    pid = pulse_server.proc.pid
    os.kill(pid, signal.SIGSTOP)  # the server holds its socket and never answers
    try:
        daemon = daemon_factory(
            {"playback": {"enabled": True, "latency": 0.02, "sample_rate": pulse_server.rate}},
            env=pulse_server.env,
            timeout=30,
            ready=False,
        )
        with Wire(daemon.socket) as w:
            # Not warm: a speak now would wait for the speaker (make run's demo waits).
            assert w.call({"op": "ping", "id": 1}) == {"id": 1, "event": "pong", "warm": False}
            h = w.call({"op": "health", "id": 2})
            assert h["playback"]["state"] == "starting" and h["starting"] is True, h
            assert h["warm"] is False, h
            w.send({"op": "synthesize", "id": 3, "text": "The speaker is not needed."})
            assert w.until(3)[-1]["event"] == "end"
            _speak(w, 4, TEXT)  # waits for the speaker, as documented
            time.sleep(0.5)
            os.kill(pid, signal.SIGCONT)
            evs = w.until(4)
            assert [e["event"] for e in evs] == ["queued", "started", "end"], evs
            assert w.call({"op": "ping", "id": 5})["warm"] is True
        assert "ttsd: ready:" in daemon.log() and "playback=ok" in daemon.log()
    finally:
        os.kill(pid, signal.SIGCONT)
