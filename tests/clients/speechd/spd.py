"""A private speech-dispatcher with ``sd_ttsd`` (and espeak-ng beside it), and a raw SSIP client.

The server runs in the foreground (``-s``), never times out (``-t 0``), reads its own
configuration (``-C``) and modules (``-m``) and listens on its own Unix socket (``-S``); its
audio goes to a PulseAudio null sink (:mod:`bench.pulsesink`).  Clients reach it through
``SPEECHD_ADDRESS``, so nothing autospawns the user's own server.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

MODULES_DIR = Path("/usr/lib/speech-dispatcher-modules")
PACKAGES = "speech-dispatcher speech-dispatcher-espeak-ng"


class SpeechdUnavailable(RuntimeError):
    pass


@dataclass
class SpeechdServer:
    workdir: Path
    ttsd_socket: str
    pulse_env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.workdir / "speechd.sock"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "log"

    def module_log(self, name: str = "ttsd") -> str:
        try:
            return (self.log_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def server_log(self) -> str:
        try:
            return (self.log_dir / "speech-dispatcher.log").read_text(errors="replace")
        except OSError:
            return ""

    @classmethod
    def start(
        cls,
        workdir: Path,
        ttsd_socket: str,
        pulse_env: dict[str, str],
        extra_conf: str = "",
        module_conf: str | None = None,
        env: dict[str, str] | None = None,
    ) -> SpeechdServer:
        """``module_conf``: the text of ``modules/ttsd.conf`` (else one naming
        ``ttsd_socket``); ``env``: added to the server's (and so its modules') environment."""
        if (
            shutil.which("speech-dispatcher") is None
            or shutil.which("spd-say") is None
            or not (MODULES_DIR / "sd_espeak-ng").exists()
        ):
            # espeak-ng runs beside sd_ttsd: with ttsd down the server still has a module.
            raise SpeechdUnavailable(
                f"speech-dispatcher or its espeak-ng module not found; apt-get install {PACKAGES}"
            )
        srv = cls(workdir, ttsd_socket, pulse_env)
        conf = workdir / "conf"
        modules = workdir / "modules"
        for d in (conf / "modules", modules, srv.log_dir, workdir / "home", workdir / "run"):
            d.mkdir(parents=True, exist_ok=True)
        (conf / "speechd.conf").write_text(
            f'LogLevel 4\nLogDir "{srv.log_dir}"\nAudioOutputMethod "pulse"\n'
            'DefaultModule ttsd\nAddModule "ttsd" "sd_ttsd" "ttsd.conf"\n'
            'AddModule "espeak-ng" "sd_espeak-ng" "espeak-ng.conf"\n' + extra_conf
        )
        if module_conf is None:
            module_conf = f'TtsdSocket "{ttsd_socket}"\nLogLevel 4\n'
        (conf / "modules" / "ttsd.conf").write_text(module_conf)
        espeak_conf = Path("/etc/speech-dispatcher/modules/espeak-ng.conf")
        if espeak_conf.exists():
            shutil.copy(espeak_conf, conf / "modules" / "espeak-ng.conf")
        wrapper = modules / "sd_ttsd"
        # The module as installed: the package's entry point, run by this interpreter.
        wrapper.write_text(
            f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" '
            '-m appliance.clients.speechd.module "$@"\n'
        )
        wrapper.chmod(0o755)
        (modules / "sd_espeak-ng").symlink_to(MODULES_DIR / "sd_espeak-ng")
        srv.env = {
            **{k: v for k, v in os.environ.items() if k != "TTSD_SOCKET"},
            **pulse_env,
            "HOME": str(workdir / "home"),
            "XDG_RUNTIME_DIR": str(workdir / "run"),
            "SPEECHD_ADDRESS": f"unix_socket:{srv.socket}",
            **(env or {}),
        }
        srv.proc = subprocess.Popen(
            [
                "speech-dispatcher",
                "-s",
                "-t",
                "0",
                "-C",
                str(conf),
                "-m",
                str(modules),
                "-c",
                "unix_socket",
                "-S",
                str(srv.socket),
            ],
            env=srv.env,
            stdout=(workdir / "server.out").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if srv.proc.poll() is not None:
                raise SpeechdUnavailable(f"speech-dispatcher exited: {srv.server_log()[-3000:]}")
            if srv.socket.exists():
                try:
                    with SSIP(srv.socket):
                        return srv
                except OSError:
                    pass
            time.sleep(0.05)
        srv.stop()
        raise SpeechdUnavailable(f"speech-dispatcher did not come up: {srv.server_log()[-3000:]}")

    def spd_say(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["spd-say", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Event:
    code: int
    msg_id: int
    data: list[str]
    at: float


class SSIP:
    """Speech-dispatcher's client protocol over its Unix socket, events kept apart."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._buf = b""
        self.events: list[Event] = []

    def __enter__(self) -> SSIP:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.sendall(b"QUIT\r\n")
        except OSError:
            pass
        self.sock.close()

    def _line(self) -> str:
        while b"\r\n" not in self._buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("speech-dispatcher closed the connection")
            self._buf += data
        raw, self._buf = self._buf.split(b"\r\n", 1)
        return raw.decode("utf-8", "replace")

    def _message(self) -> list[str]:
        lines = [self._line()]
        while len(lines[-1]) >= 4 and lines[-1][3] == "-":
            lines.append(self._line())
        return lines

    def _event(self, lines: list[str]) -> None:
        data = [ln[4:] for ln in lines[:-1]]
        msg_id = int(data[0]) if data and data[0].isdigit() else -1
        self.events.append(Event(int(lines[-1][:3]), msg_id, data[2:], time.monotonic()))

    def command(self, text: str) -> list[str]:
        self.sock.sendall(text.encode() + b"\r\n")
        while True:
            lines = self._message()
            if lines[-1].startswith("7"):
                self._event(lines)
                continue
            if not lines[-1][:1] == "2":
                raise RuntimeError(f"{text!r}: {lines}")
            return lines

    def setup(self, *settings: str) -> None:
        self.command("SET self CLIENT_NAME root:ttsd-tests:main")
        self.command("SET self NOTIFICATION all on")
        for s in settings:
            self.command(f"SET self {s}")

    def speak(self, text: str) -> int:
        self.command("SPEAK")
        body = "\r\n".join("." + ln if ln.startswith(".") else ln for ln in text.split("\n"))
        lines = self.command(body + "\r\n.")
        return int(lines[0][4:])

    def wait_event(self, msg_id: int, codes: tuple[int, ...], timeout: float = 60.0) -> Event:
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events:
                if ev.msg_id == msg_id and ev.code in codes:
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {codes} for message {msg_id}: {self.events}")
            self.sock.settimeout(left)
            try:
                lines = self._message()
            except TimeoutError:
                continue
            if lines[-1].startswith("7"):
                self._event(lines)

    def of(self, msg_id: int) -> list[Event]:
        return [e for e in self.events if e.msg_id == msg_id]


def voices_listed(output: str) -> list[str]:
    return re.findall(r"^\s*(\S+)\s+\S+\s+\S+\s*$", output, re.M)
