"""The client library and ttsctl against the real daemon."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from appliance.clients.client import AsyncClient, Client, TtsdError
from tests.conftest import REPO, Daemon


def _ttsctl(
    daemon: Daemon, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "appliance.clients.ctl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_ttsctl_synth_writes_wav(daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", "Hello there.", "-o", str(out))
    assert r.returncode == 0, r.stderr
    with wave.open(str(out)) as w:
        assert w.getframerate() == 22050 and w.getnchannels() == 1 and w.getsampwidth() == 2
        assert w.getnframes() > 22050 * 0.3


def test_ttsctl_reads_stdin_and_env_socket(daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "stdin.wav"
    r = subprocess.run(
        [sys.executable, "-m", "appliance.clients.ctl", "synth", "-", "-o", str(out)],
        input="From standard input.",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TTSD_SOCKET": daemon.socket},
    )
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 44


@pytest.mark.parametrize(
    "cmd,needle",
    [("info", "en_US-joe-medium"), ("health", "ok"), ("ping", "pong"), ("stats", "ttfp_ms")],
)
def test_ttsctl_queries(daemon: Daemon, cmd: str, needle: str) -> None:
    r = _ttsctl(daemon, "--socket", daemon.socket, cmd)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout


def test_ttsctl_reports_errors(daemon: Daemon, tmp_path: Path) -> None:
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", "   ", "-o", str(tmp_path / "x.wav"))
    assert r.returncode == 1 and "empty_text" in r.stderr
    r = _ttsctl(daemon, "--socket", str(tmp_path / "nope.sock"), "ping")
    assert r.returncode == 1 and "cannot connect" in r.stderr


def test_sync_client_typed_errors(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        assert c.ping()
        with pytest.raises(TtsdError) as info:
            c.synthesize_all("hello", voice="nobody")
        assert info.value.code == "unknown_voice"
        result = c.synthesize_all("Still fine.", format="f32le")
        assert result.format == "f32le" and result.samples().size > 1000
        assert result.stats["chunks"] == len(result.chunks)


def test_async_client_runs_requests_concurrently(daemon: Daemon) -> None:
    async def run() -> list[int]:
        async with await AsyncClient.connect(daemon.socket) as ac:
            results = await asyncio.gather(
                *(ac.synthesize_all(f"Concurrent request {i}.") for i in range(4))
            )
            assert (await ac.request("ping"))["event"] == "pong"
            return [len(r.audio) for r in results]

    sizes = asyncio.run(run())
    assert all(s > 0 for s in sizes)


_README_PRELUDE = """
import asyncio, time
TEXT = "Turn left at the lights. " + "Then keep going straight on for quite a while. " * 4
finished = [0.0]
played = []

async def llm_tokens():
    for word in TEXT.split(" "):
        yield word + " "
        await asyncio.sleep(0.04)
    finished[0] = time.monotonic()

def play(audio):
    played.append(time.monotonic())
"""


def test_the_readmes_text_stream_example_speaks_while_the_text_comes(daemon: Daemon) -> None:
    """The README read the audio only after finish(): nothing was heard until the model
    had written everything."""
    readme = (REPO / "README.md").read_text()
    (block,) = [b for b in readme.split("```python\n")[1:] if "speak_as_it_is_written" in b]
    run = "asyncio.run(speak_as_it_is_written())\n"
    defined, after = block.split("```", 1)[0].split(run)  # it runs as pasted: here, timed
    script = (
        defined + _README_PRELUDE + run + after + "print(len(played), played[0] < finished[0])\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TTSD_SOCKET": daemon.socket},
    )
    assert r.returncode == 0, r.stderr
    chunks, early = r.stdout.split()
    assert int(chunks) > 1 and early == "True", r.stdout


def test_ttsctl_synth_checks_the_output_before_synthesizing(daemon: Daemon, tmp_path: Path) -> None:
    """A missing directory was found after the synthesis, as a traceback.  Checked before
    anything else: here before connecting to a daemon that is not even there."""
    nowhere = str(tmp_path / "no-daemon.sock")
    for out, words in (
        (tmp_path / "missing" / "x.wav", "no such directory"),
        (tmp_path / "x.xyz", "unknown audio extension '.xyz'"),
        (tmp_path, "is a directory"),
    ):
        r = _ttsctl(daemon, "--socket", nowhere, "synth", "Hello.", "-o", str(out))
        assert r.returncode == 2, r
        assert "Traceback" not in r.stderr and r.stdout == ""
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"ttsctl: {out}: ") and words in line, line


@pytest.mark.parametrize(
    ("suffix", "container"), [(".mp3", "MP3"), (".flac", "FLAC"), (".ogg", "OGG"), (".wav", "WAV")]
)
def test_ttsctl_synth_encodes_by_extension(
    daemon: Daemon, tmp_path: Path, suffix: str, container: str
) -> None:
    """-o x.mp3 wrote WAV bytes into the .mp3."""
    import soundfile

    out = tmp_path / f"hello{suffix}"
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", "Hello there.", "-o", str(out))
    assert r.returncode == 0, r.stderr
    info = soundfile.info(str(out))
    assert info.format == container and info.channels == 1
    assert info.duration > 0.3


def test_ttsctl_stop_and_phonemes_speak_plainly(daemon: Daemon) -> None:
    r = _ttsctl(daemon, "--socket", daemon.socket, "stop")
    assert r.returncode == 0 and r.stdout.startswith("stopped"), r.stdout  # was raw JSON
    assert "{" not in r.stdout
    r = _ttsctl(daemon, "--socket", daemon.socket, "phonemes", "--json", "Hello")
    assert r.returncode == 0, r.stderr
    assert "həlˈoʊ" in r.stdout and "\\u" not in r.stdout  # the IPA, not its escapes


def test_ttsctl_phonemes_markdown(daemon: Daemon) -> None:
    """The issue's example: the markup is not read (it was "asterisk asterisk sure …")."""
    src = "**Sure!** Here are three options: 1. **Pasta** ## Weather | Day | Rain |"
    r = _ttsctl(daemon, "--socket", daemon.socket, "phonemes", "--json", "--markdown", src)
    assert r.returncode == 0, r.stderr
    said = " ".join(c["text"] for c in json.loads(r.stdout)["clauses"])
    assert "*" not in said and "#" not in said and "|" not in said
    assert said.startswith("Sure! Here are three options:") and "Weather" in said


def test_ttsctl_options_after_the_command_and_version(daemon: Daemon, tmp_path: Path) -> None:
    """--socket was taken only before the command; there was no --version."""
    r = _ttsctl(daemon, "ping", "--socket", daemon.socket)
    assert r.returncode == 0 and r.stdout == "pong\n", r.stderr
    # One given before is not undone by a command that names none.
    r = _ttsctl(daemon, "--socket", daemon.socket, "ping")
    assert r.returncode == 0 and r.stdout == "pong\n", r.stderr
    r = _ttsctl(daemon, "--version")
    assert r.returncode == 0 and r.stdout.startswith("ttsctl 0."), r


def test_ttsctl_says_how_to_start_the_daemon(daemon: Daemon, tmp_path: Path) -> None:
    """ "cannot connect to …" said nothing of how to get a daemon there."""
    nowhere = str(tmp_path / "nope.sock")
    for args in (("--socket", nowhere, "ping"), ("synth", "Hi.", "-o", "-", "--socket", nowhere)):
        r = _ttsctl(daemon, *args)
        assert r.returncode == 1 and "Traceback" not in r.stderr
        (line,) = r.stderr.splitlines()
        assert f"cannot connect to {nowhere}: No such file or directory" in line
        assert "Start it with `ttsd serve`" in line


def test_ttsctl_announces_the_files_own_rate(daemon: Daemon, tmp_path: Path) -> None:
    """An Opus file was announced "at 22050 Hz"; Opus has no such rate and is 24 kHz."""
    import soundfile

    out = tmp_path / "hello.opus"
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", "Hello there.", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert soundfile.info(str(out)).samplerate == 24000
    assert "at 24000 Hz" in r.stderr and "22050" not in r.stderr
