"""``ttsctl synth -o`` writes whole files: their headers carry the real length.

A file on disk is seekable, so nothing of a stream's "length unknown" belongs in it: a
FLAC whose STREAMINFO says "total samples unknown" is one Python's ``soundfile`` reports as
endless and cannot read to its end.
"""

from __future__ import annotations

import wave
from pathlib import Path

import pytest
import soundfile

from appliance.clients.ctl import OUTPUT_FORMATS
from tests.clients.test_client_cli import _ttsctl
from tests.conftest import Daemon, DaemonFactory

TEXT = "The files on disk say how long they are."
ROOMY = {"admission_max_load": 8.0, "admission_backlog_ms": 600000}


@pytest.fixture(scope="module")
def same_audio(daemon_factory: DaemonFactory) -> Daemon:
    """Every request of the same text gets the same samples, so each file's length can be
    held against the WAV's.  (Files, not admission: a busy box must not refuse them.)"""
    return daemon_factory({"voices": {"deterministic": True}, "scheduler": ROOMY})


def _synth(daemon: Daemon, out: Path) -> None:
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", TEXT, "-o", str(out))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("suffix", sorted(set(OUTPUT_FORMATS) - {".wav"}))
def test_every_format_has_its_length(same_audio: Daemon, tmp_path: Path, suffix: str) -> None:
    ref = tmp_path / "ref.wav"
    _synth(same_audio, ref)
    with wave.open(str(ref)) as w:
        frames, rate = w.getnframes(), w.getframerate()
    assert frames > rate  # a second of speech at least

    out = tmp_path / f"x{suffix}"
    _synth(same_audio, out)
    with soundfile.SoundFile(str(out)) as f:
        # Opus takes only some rates: a 22 050 Hz voice is resampled to 24 000 Hz.
        expected = frames * f.samplerate / rate
        assert abs(f.frames - expected) <= 2, (f.frames, expected)
        read = f.read(dtype="int16")  # to its end: the length is the samples there are
        assert len(read) == f.frames
