"""Drive ``sd_ttsd`` through a pipe the way speech-dispatcher 0.11 does.

The reader parses the module's stdout exactly as the server's ``output_read_reply`` and
``output_module_is_speaking`` do: lines until one whose fourth byte is a space; a ``705``
reply is audio whose ``705-AUDIO`` line carries a NUL and the HDLC-escaped samples.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from appliance.clients.speechd.wire import hdlc_unescape

ENDINGS = (702, 703, 704)


@dataclass
class Reply:
    code: int
    lines: list[bytes]
    """Every line of the reply, without newlines (the last is ``NNN text``)."""
    pcm: bytes = b""
    sample_rate: int = 0
    at: float = field(default_factory=time.monotonic)

    @property
    def text(self) -> str:
        return self.lines[-1][4:].decode("utf-8", "replace")

    @property
    def data(self) -> list[str]:
        """The ``NNN-…`` lines' payloads (voices, mark names, status)."""
        return [ln[4:].decode("utf-8", "replace") for ln in self.lines[:-1]]


def parse_audio(lines: list[bytes]) -> tuple[bytes, int]:
    params: dict[str, int] = {}
    payload = None
    for ln in lines[:-1]:
        assert ln.startswith(b"705-"), ln[:40]
        if ln.startswith(b"705-AUDIO\0"):
            payload = hdlc_unescape(ln[len(b"705-AUDIO\0") :])
            break
        key, _, value = ln[4:].partition(b"=")
        params[key.decode()] = int(value)
    assert payload is not None, "a 705 reply without its 705-AUDIO line"
    assert lines[-1] == b"705 AUDIO"
    assert params["bits"] == 16 and params["num_channels"] == 1 and params["big_endian"] == 0
    assert len(payload) == params["num_samples"] * 2, (len(payload), params)
    return payload, params["sample_rate"]


class ModulePipe:
    def __init__(self, socket: str | None, workdir: Path, config: str | None = None) -> None:
        self.workdir = workdir
        conf = workdir / "ttsd.conf"
        text = config if config is not None else ""
        if socket is not None and "TtsdSocket" not in text:
            text = f'TtsdSocket "{socket}"\n' + text
        conf.write_text(text + "LogLevel 5\n")
        self.stderr_path = workdir / "sd_ttsd.log"
        env = {k: v for k, v in os.environ.items() if k != "TTSD_SOCKET"}
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "appliance.clients.speechd.module", str(conf)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        self.replies: queue.Queue[Reply | None] = queue.Queue()
        self.seen: list[Reply] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        lines: list[bytes] = []
        for raw in self.proc.stdout:
            line = raw[:-1] if raw.endswith(b"\n") else raw
            lines.append(line)
            if len(line) < 4 or line[3:4] == b" ":
                try:
                    code = int(line[:3])
                except ValueError:
                    code = -1
                reply = Reply(code, lines)
                if code == 705:
                    reply.pcm, reply.sample_rate = parse_audio(lines)
                self.replies.put(reply)
                lines = []
        self.replies.put(None)

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def send(self, data: bytes | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data.encode() if isinstance(data, str) else data)
        self.proc.stdin.flush()

    def reply(self, timeout: float = 30.0) -> Reply:
        try:
            item = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no reply within {timeout}s; log:\n{self.log()}") from None
        if item is None:
            raise AssertionError(f"the module exited ({self.proc.poll()}); log:\n{self.log()}")
        self.seen.append(item)
        return item

    def expect(self, code: int, timeout: float = 30.0) -> Reply:
        r = self.reply(timeout)
        assert r.code == code, (code, r.lines[:3], self.log()[-2000:])
        return r

    def quiet(self, seconds: float) -> list[Reply]:
        """Whatever arrives within ``seconds`` (nothing, when the module behaves)."""
        out: list[Reply] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                item = self.replies.get(timeout=left)
            except queue.Empty:
                break
            if item is None:
                break
            out.append(item)
        return out

    # -- sequences the server sends
    def init(self) -> Reply:
        self.send("INIT\n")
        r = self.reply()
        assert r.code == 299, (r.lines, self.log())
        self.send("AUDIO\naudio_output_method=server\n.\n")
        self.expect(207)
        self.expect(203)
        self.send("LOGLEVEL\nlog_level=5\n.\n")
        self.expect(207)
        self.expect(203)
        return r

    def set(self, **values: object) -> Reply:
        base: dict[str, object] = {
            "pitch": 0,
            "pitch_range": 0,
            "rate": 0,
            "volume": 100,
            "punctuation_mode": "none",
            "spelling_mode": "off",
            "cap_let_recogn": "none",
            "voice": "MALE1",
            "language": "en",
            "synthesis_voice": "NULL",
        }
        base.update(values)
        self.send("SET\n" + "".join(f"{k}={v}\n" for k, v in base.items()) + ".\n")
        self.expect(203)
        return self.reply()

    def speak_cmd(self, body: bytes | str, command: str = "SPEAK") -> None:
        data = body.encode() if isinstance(body, str) else body
        stuffed = b"\n".join(b"." + ln if ln.startswith(b".") else ln for ln in data.split(b"\n"))
        self.send(command.encode() + b"\n" + stuffed + b"\n.\n")

    def speak(self, body: bytes | str, command: str = "SPEAK") -> None:
        """SPEAK up to ``200 OK SPEAKING``."""
        self.speak_cmd(body, command)
        self.expect(202)
        self.expect(200)

    def events_until_end(self, timeout: float = 60.0) -> list[Reply]:
        """``701`` … up to and including the ending event."""
        out: list[Reply] = []
        deadline = time.monotonic() + timeout
        while True:
            r = self.reply(max(0.1, deadline - time.monotonic()))
            out.append(r)
            if r.code in ENDINGS:
                return out

    def quit(self) -> int:
        if self.proc.poll() is None:
            try:
                self.send("QUIT\n")
            except (BrokenPipeError, OSError):
                pass
            try:
                return self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return int(self.proc.returncode)


def audio_of(events: list[Reply]) -> npt.NDArray[np.float32]:
    pcm = b"".join(r.pcm for r in events if r.code == 705)
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
