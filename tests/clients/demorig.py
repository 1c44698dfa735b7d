"""The real ``python -m appliance.clients.demo`` (``make run``) as a test drives it: its
own working directory and ``TMPDIR``, its output collected line by line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import interrupt


class Demo:
    """``python -m appliance.clients.demo`` in ``workdir``, its output collected by line."""

    def __init__(
        self,
        workdir: Path,
        voice_cache: Path,
        level: str = "info",
        playback: dict[str, Any] | None = None,
        sound_env: dict[str, str] | None = None,
    ) -> None:
        """``sound_env``: how to reach a sound server (the null sink's); without it, no
        sound server and no device at all (a user's own server is not looked for)."""
        self.tmpdir = workdir / "tmp"
        self.tmpdir.mkdir(parents=True)
        config = workdir / "config.yaml"
        cfg = {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"backend": "onnx-cpu"},
            "logging": {"level": level},
            "playback": playback or {},
        }
        config.write_text(yaml.safe_dump(cfg))
        (workdir / "client.conf").write_text("autospawn = no\n")
        no_server = {
            "PULSE_SERVER": f"unix:{workdir / 'no-pulse'}",
            "PULSE_CLIENTCONFIG": str(workdir / "client.conf"),
        }
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(self.tmpdir),
            "TTSD_CONFIG": str(config),
            **(sound_env or no_server),
        }
        env.pop("TTSD_SOCKET", None)
        repo = str(Path(__file__).resolve().parents[2])  # this checkout, from any directory
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "appliance.clients.demo"],
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def socket(self) -> str:
        """The daemon's socket, as the demo's first line says."""
        self.wait_for("ttsd: starting on ")
        line = next(line for line in self.lines if line.startswith("ttsd: starting on "))
        return line.removeprefix("ttsd: starting on ").split(" (")[0]

    def wait_for(self, text: str, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {text!r}:\n{self.output()}"
            time.sleep(0.01)

    def ctrl_c(self) -> tuple[int, float, list[str]]:
        """SIGINT to the demo (as a terminal's Ctrl-C: the daemon has a session of its
        own); the exit status, the seconds it took, the lines printed after it."""
        said = len(self.lines)
        rc, took, _ = interrupt(self.proc, lambda: list(self.lines))
        self._reader.join(timeout=10)  # the lines still in the pipe at the exit
        return rc, took, self.lines[said:]

    def leftovers(self) -> list[str]:
        """The demo's directories left in ``TMPDIR`` (ONNX Runtime keeps a ``.ses`` file
        of its own there)."""
        return [p.name for p in self.tmpdir.iterdir() if p.name.startswith("ttsd-")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
