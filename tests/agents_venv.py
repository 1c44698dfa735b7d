"""The voice-agent clients the tests run against the daemon, in a venv of their own.

pipecat-ai and livekit-agents pin their own numpy, websockets, protobuf …; installed
beside ttsd they could move ttsd's pins.  So they live in ``.venv-agents``
(``TTSD_AGENTS_VENV`` to put it elsewhere), made by ``make agents-venv`` (``make test``
runs it) or, failing that, by the first test that needs it: ``python -m
tests.agents_venv``.  Idempotent: a stamp names the requirements it holds; the venv is
remade only when they change.  Tests run the clients as subprocesses of its python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = ("pipecat-ai[elevenlabs]==1.14.0", "livekit-plugins-elevenlabs==1.8.9")
"""pipecat-ai's ElevenLabsTTSService and LiveKit Agents' ElevenLabs TTS (both speak
ElevenLabs' multi-stream-input)."""


def venv_dir() -> Path:
    return Path(os.environ.get("TTSD_AGENTS_VENV") or REPO / ".venv-agents")


def agents_python() -> Path:
    """The venv's python, the venv made first when it lacks these requirements."""
    venv = venv_dir()
    py = venv / "bin" / "python"
    stamp = venv / ".installed"
    want = "\n".join(REQUIREMENTS)
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True)
    stamp.write_text(want)
    return py


if __name__ == "__main__":
    print(agents_python())
