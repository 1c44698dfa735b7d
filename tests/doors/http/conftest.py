"""The real daemon with its HTTP front end on a free loopback port, and audio decoding."""

from __future__ import annotations

import io
import socket
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import soundfile

from tests.conftest import Daemon, DaemonFactory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class HttpDaemon:
    daemon: Daemon
    base: str
    """``http://127.0.0.1:PORT``"""
    key: str | None = None

    @property
    def v1(self) -> str:
        return self.base + "/v1"


def wait_http(base: str, daemon: Daemon, timeout: float = 30.0) -> None:
    """The HTTP listener comes up just after the Unix socket: wait for it."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not daemon.alive():
            raise RuntimeError(f"daemon exited:\n{daemon.log()}")
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no HTTP listener within {timeout}s:\n{daemon.log()}")


def start_http(
    daemon_factory: DaemonFactory,
    http: dict[str, Any] | None = None,
    cli_flag: bool = False,
    nofile: int | None = None,
    seams: list[str] | None = None,
    **config: Any,
) -> HttpDaemon:
    """A daemon listening on a free loopback port, given by ``http.listen`` or, with
    ``cli_flag``, by ``ttsd serve --http``."""
    port = free_port()
    listen = f"127.0.0.1:{port}"
    cfg: dict[str, Any] = {"http": {**({} if cli_flag else {"listen": listen}), **(http or {})}}
    cfg.update(config)
    daemon = daemon_factory(
        cfg, args=["--http", listen] if cli_flag else None, nofile=nofile, seams=seams
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(base, daemon)
    return HttpDaemon(daemon, base, (http or {}).get("api_key"))


@pytest.fixture(scope="session")
def http_daemon(daemon_factory: DaemonFactory) -> HttpDaemon:
    """One daemon for the HTTP tests: small text cap, one OpenAI name mapped explicitly."""
    return start_http(
        daemon_factory,
        {"voice_map": {"alloy": "en_US-joe-medium"}},
        limits={"max_text_chars": 2000, "client_too_slow_s": 2.0, "max_output_buffer_bytes": 65536},
    )


def decode(data: bytes, fmt: str, pcm_rate: int = 22050) -> tuple[np.ndarray, int]:
    """Mono int16 samples and their rate, decoded with soundfile (libsndfile)."""
    if fmt == "pcm":
        return np.frombuffer(data, dtype="<i2").copy(), pcm_rate
    with soundfile.SoundFile(io.BytesIO(data)) as f:
        rate = f.samplerate
        if f.frames < 2**62:
            return f.read(dtype="int16"), rate
        # A streamed FLAC says "length unknown" (total samples 0 in STREAMINFO): libsndfile
        # then reports an endless file and its seek-based tell() fails at the end, so read
        # through its plain read call until it returns nothing.
        out: list[np.ndarray] = []
        block = np.zeros(4096, dtype=np.int16)
        ffi, snd = soundfile._ffi, soundfile._snd
        while True:
            n = snd.sf_readf_short(f._file, ffi.cast("short*", block.ctypes.data), len(block))
            if n <= 0:
                break
            out.append(block[:n].copy())
        return np.concatenate(out), rate
