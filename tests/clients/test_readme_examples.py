"""The README's examples run as pasted, against the real daemon (HTTP door on), and the
outputs it shows are what the commands print.  (``py`` blocks are the lines that point
another framework's own classes at ttsd, Pipecat's and LiveKit's: not programs of their
own; tests/doors/elevenlabs/test_pipecat.py runs Pipecat's against the daemon.)"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.test_client_cli import _ttsctl
from tests.conftest import REPO, Daemon, DaemonFactory
from tests.doors.http.conftest import HttpDaemon, start_http

README = (REPO / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"^ *```python\n(.*?)^ *```", README, flags=re.S | re.M)
README_ADDRESS = "127.0.0.1:8880"


def _dedent(block: str) -> str:
    """A block inside a list item is indented as a whole."""
    lines = block.splitlines()
    indent = min(len(x) - len(x.lstrip()) for x in lines if x.strip())
    return "\n".join(x[indent:] for x in lines) + "\n"


@pytest.fixture(scope="module")
def served(daemon_factory: DaemonFactory) -> HttpDaemon:
    return start_http(daemon_factory)


def test_the_readme_has_its_examples() -> None:
    assert len(PYTHON_BLOCKS) >= 5  # the client, text stream, telephony, two openai ones


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_each_python_example_runs_as_pasted(served: HttpDaemon, tmp_path: Path, index: int) -> None:
    """They called play() and bridge.send() that were nowhere, used `async with` at the
    top of a module, or only defined a coroutine nothing ran."""
    code = _dedent(PYTHON_BLOCKS[index])
    # The one change: the address the README's HTTP daemon listens on, to this one's.
    code = code.replace(README_ADDRESS, served.base.removeprefix("http://"))
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "TTSD_SOCKET": served.daemon.socket, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, f"{code}\n{r.stderr}"
    assert "Traceback" not in r.stderr
    # It did something: printed what it got, or wrote its audio (not only defined code).
    assert r.stdout.strip() or any(p.stat().st_size > 1000 for p in tmp_path.iterdir()), code


def test_the_phonemes_example_shows_what_the_command_prints(daemon: Daemon) -> None:
    """The README showed a sentence; the command prints a word and its phonemes a line."""
    block = README.split("ttsctl phonemes --markdown ", 1)[1].split("```", 1)[0]
    command, *shown = block.strip().splitlines()
    r = _ttsctl(daemon, "--socket", daemon.socket, "phonemes", "--markdown", *shlex.split(command))
    assert r.returncode == 0, r.stderr
    printed = [line.split() for line in r.stdout.splitlines()]
    assert printed == [line.removeprefix("#").split() for line in shown]
