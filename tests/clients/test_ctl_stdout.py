"""``ttsctl synth -o -``: audio on standard output through real pipes, status on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np

from tests.clients.test_client_cli import _ttsctl
from tests.conftest import Daemon

CTL = [sys.executable, "-m", "appliance.clients.ctl"]
TEXT = "Hello there. The door is open."
PARSE_WAV = """
import sys, wave
w = wave.open(sys.stdin.buffer)
data = w.readframes(10**9)
print(w.getframerate(), w.getnchannels(), w.getsampwidth(), len(data))
"""


def _pipe(left: list[str], right: list[str]) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    """``left | right``, as a shell runs it: the real pipe between two processes."""
    with subprocess.Popen(left, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as a:
        assert a.stdout is not None and a.stderr is not None
        b = subprocess.run(right, stdin=a.stdout, capture_output=True, timeout=120)
        a.stdout.close()  # the reader's end is the right side's only
        err = a.stderr.read().decode()
        a.wait(timeout=60)
    return subprocess.CompletedProcess(left, a.returncode, b.stdout, err.encode()), b.stdout


def test_dash_is_standard_output_as_a_wav_a_program_reads(daemon: Daemon, tmp_path: Path) -> None:
    """-o - wrote a file named "-"; the status line went into the audio."""
    left, out = _pipe(
        [*CTL, "synth", TEXT, "-o", "-", "--socket", daemon.socket],
        [sys.executable, "-c", PARSE_WAV],
    )
    assert left.returncode == 0, left.stderr
    rate, channels, width, size = map(int, out.decode().split())
    assert (rate, channels, width) == (22050, 1, 2) and size > 22050  # over half a second
    assert not (Path.cwd() / "-").exists()
    err = left.stderr.decode()
    assert "Traceback" not in err and f"{round(1000 * size / 2 / rate)} ms of audio" in err


def test_dev_stdout_is_the_same_stream(daemon: Daemon) -> None:
    """-o /dev/stdout got the status line among the samples, and a header patched in vain."""
    left, out = _pipe(
        [*CTL, "--socket", daemon.socket, "synth", TEXT, "-o", "/dev/stdout"],
        [sys.executable, "-c", PARSE_WAV],
    )
    assert left.returncode == 0, left.stderr
    assert int(out.decode().split()[3]) > 22050


def test_a_reader_that_goes_away_ends_ttsctl_quietly(daemon: Daemon) -> None:
    """`… -o - | head -c 100` printed a BrokenPipeError traceback."""
    left, out = _pipe(
        [*CTL, "--socket", daemon.socket, "synth", TEXT * 4, "-o", "-"],
        ["head", "-c", "100"],
    )
    assert len(out) == 100 and out.startswith(b"RIFF")
    assert left.stderr == b"", left.stderr
    assert left.returncode == 141  # as a C tool ended by SIGPIPE


def test_raw_is_bare_samples_with_the_rate_on_stderr(daemon: Daemon, tmp_path: Path) -> None:
    wav = tmp_path / "ref.wav"
    same = ["--noise-scale", "0", "--noise-w", "0", "--socket", daemon.socket]
    assert _ttsctl(daemon, "synth", TEXT, "-o", str(wav), *same).returncode == 0
    r = subprocess.run([*CTL, "synth", TEXT, "--raw", *same], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"raw s16le mono at 22050 Hz" in r.stderr.splitlines()[0]
    with wave.open(str(wav)) as w:
        assert r.stdout == w.readframes(w.getnframes())  # the WAV's samples, no header


def test_raw_into_a_file(daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "speech.pcm"
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", TEXT, "--raw", "-o", str(out))
    assert r.returncode == 0, r.stderr
    samples = np.frombuffer(out.read_bytes(), dtype="<i2")
    assert samples.size > 22050 and np.abs(samples).max() > 1000
    assert "raw s16le mono" in r.stderr and r.stdout == ""


def test_the_status_line_is_on_stderr_for_files_too(daemon: Daemon, tmp_path: Path) -> None:
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", TEXT, "-o", str(tmp_path / "a.wav"))
    assert r.returncode == 0 and r.stdout == ""
    assert "ms of audio at 22050 Hz" in r.stderr


def test_stream_to_standard_output(daemon: Daemon) -> None:
    r = subprocess.run(
        [*CTL, "--socket", daemon.socket, "synth", "--stream", "-", "-o", "-"],
        input=TEXT.encode(),
        capture_output=True,
        timeout=120,
        env={**os.environ},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout[:4] == b"RIFF" and len(r.stdout) > 44 + 22050


def test_audio_is_not_written_to_a_terminal(tmp_path: Path) -> None:
    """Refused before anything else (here: before connecting to a daemon that is not there)."""
    import pty

    main, tty = pty.openpty()
    try:
        r = subprocess.run(
            [*CTL, "--socket", str(tmp_path / "none.sock"), "synth", "Hi.", "-o", "-"],
            stdout=tty,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(tty)
        os.close(main)
    assert r.returncode == 2
    assert r.stderr == b"ttsctl: standard output is a terminal: pipe it (| aplay) or give -o FILE\n"
