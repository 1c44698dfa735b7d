"""sd_ttsd under the real speech-dispatcher (a private instance), against the real daemon,
audio to a PulseAudio null sink."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench.pulsesink import PulseServer
from tests.clients.speechd.spd import SSIP, SpeechdServer, voices_listed

LONG = " ".join(f"Sentence {i} of a long message that keeps on going." for i in range(30))
LOUD = 0.01


def test_spd_say_speaks_through_ttsd(speechd: SpeechdServer, speechd_pulse: PulseServer) -> None:
    with speechd_pulse.record() as rec:
        start = rec.frames()
        done = speechd.spd_say("-w", "-o", "ttsd", "Hello from speech dispatcher.")
        assert done.returncode == 0, done.stderr
        time.sleep(0.3)
        heard = rec.samples()[start:]
    loud = np.flatnonzero(np.abs(heard) > LOUD)
    assert loud.size, speechd.module_log()
    assert (loud[-1] - loud[0]) / rec.rate > 0.8  # a whole sentence, not a click


def test_spd_say_lists_ttsd_voices(speechd: SpeechdServer) -> None:
    listed = speechd.spd_say("-o", "ttsd", "-L")
    assert listed.returncode == 0, listed.stderr
    assert "en_US-joe-medium" in voices_listed(listed.stdout)
    modules = speechd.spd_say("-O")
    assert "ttsd" in modules.stdout.split()


def test_important_interrupts_text(speechd: SpeechdServer) -> None:
    with SSIP(speechd.socket) as c:
        c.setup("OUTPUT_MODULE ttsd", "PRIORITY text")
        first = c.speak(LONG)
        c.wait_event(first, (701,))
        c.command("SET self PRIORITY important")
        second = c.speak("Important news.")
        c.wait_event(first, (702, 703))
        assert c.wait_event(first, (702, 703)).code == 703  # cut off, not finished
        assert c.wait_event(second, (701,))
        assert c.wait_event(second, (702, 703)).code == 702


def test_cancel_silences_a_long_message(speechd: SpeechdServer, speechd_pulse: PulseServer) -> None:
    with speechd_pulse.record() as rec, SSIP(speechd.socket) as c:
        c.setup("OUTPUT_MODULE ttsd")
        msg = c.speak(LONG)
        c.wait_event(msg, (701,))
        time.sleep(1.5)
        t_cancel = time.monotonic()
        assert speechd.spd_say("-C").returncode == 0
        assert c.wait_event(msg, (702, 703)).code == 703
        time.sleep(1.5)
        heard = rec.samples()
        i_cancel = rec.index_at(t_cancel)
    before = np.abs(heard[max(0, i_cancel - rec.rate) : i_cancel])
    after = np.abs(heard[i_cancel + rec.rate // 2 :])
    assert before.max() > LOUD  # it was speaking
    assert after.max() < LOUD, "still speaking half a second after the cancel"


def test_index_marks_come_back_in_order(speechd: SpeechdServer) -> None:
    with SSIP(speechd.socket) as c:
        c.setup("OUTPUT_MODULE ttsd", "SSML_MODE on")
        msg = c.speak(
            '<speak>First part.<mark name="one"/> Second part.<mark name="two"/>'
            " Third part.</speak>"
        )
        c.wait_event(msg, (702, 703))
        marks = [e.data[0] for e in c.of(msg) if e.code == 700]
        assert [m for m in marks if not m.startswith("__spd")] == ["one", "two"]
        assert c.of(msg)[-1].code == 702


def test_rate_changes_the_spoken_length(speechd: SpeechdServer) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice over."
    took = {}
    with SSIP(speechd.socket) as c:
        c.setup("OUTPUT_MODULE ttsd")
        for rate in (0, 100):
            c.command(f"SET self RATE {rate}")
            msg = c.speak(text)
            begin = c.wait_event(msg, (701,)).at
            took[rate] = c.wait_event(msg, (702,)).at - begin
    # The null sink plays in real time: half the audio takes about half as long.
    assert took[100] < 0.8 * took[0], took


def test_ttsd_down_is_a_clear_error(speechd_pulse: PulseServer, tmp_path: Path) -> None:
    server = SpeechdServer.start(tmp_path, str(tmp_path / "no-ttsd.sock"), speechd_pulse.env)
    try:
        modules = server.spd_say("-O").stdout.split()
        assert "ttsd" not in modules
        assert "espeak-ng" in modules
        assert "ttsd is not running" in server.server_log() + server.module_log()
    finally:
        server.stop()
