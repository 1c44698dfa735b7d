"""``make run`` on a box without a speaker: the real ``python -m appliance.clients.demo``
with the real daemon under it (issue 42).

- The greeting is written to ``greeting.wav``; the closing hint is one that works here
  (``ttsctl synth … -o``, not ``ttsctl say``); the missing device is said in a user's
  terms (not PortAudio's "Error querying device -1").
- Ctrl-C while it starts: one line, exit 130 within half a second (asked; bounded
  generously here), no traceback.
- Whatever happens, no empty ``/tmp/ttsd-XXXXXXXX`` is left behind.
(With a speaker, on the null sink: tests/playback/test_demo_speaker.py.)
"""

from __future__ import annotations

from pathlib import Path

from tests.clients.demorig import Demo

STOP_BOUND_S = 1.5
"""Asked: 0.5 s; room for a busy shared box."""


def test_without_a_speaker_the_greeting_is_a_file_and_the_hint_works(
    tmp_path: Path, bundled_cut: Path
) -> None:
    demo = Demo(tmp_path, bundled_cut)
    try:
        demo.wait_for("ttsd: try")
        out = demo.output()
        greeting = tmp_path / "greeting.wav"
        assert f"greeting written to {greeting}" in out, out
        assert greeting.stat().st_size > 44
        hint = next(line for line in demo.lines if "ttsd: try" in line)
        assert "synth 'hello' -o hello.wav" in hint and " say " not in hint, hint
        # The missing device, in a user's terms, with the way to pick one.
        assert "no audio output device found" in out and "python -m sounddevice" in out, out
        assert "Error querying device" not in out and "PortAudio" not in out, out
        rc, _took, after = demo.ctrl_c()
    finally:
        demo.stop()
    assert rc == 130, demo.output()
    assert not any("Traceback" in line for line in after), after
    assert demo.leftovers() == []  # the socket's directory is gone


def test_ctrl_c_while_it_starts_is_one_line_and_130(tmp_path: Path, bundled_cut: Path) -> None:
    """Before: ignored for the whole voice cut, then a 35-line traceback and make's
    "Error 254" (the demo exited with the daemon's -2)."""
    demo = Demo(tmp_path, bundled_cut, level="debug")
    try:
        demo.wait_for("malloc arenas")  # the daemon has read its config: importing next
        rc, took, after = demo.ctrl_c()
    finally:
        demo.stop()
    assert rc == 130, demo.output()
    assert took < STOP_BOUND_S, (took, demo.output())
    assert len(after) == 1 and "interrupted while starting" in after[0], after
    assert demo.leftovers() == []
