"""The bench's rig: a real daemon started on a temporary socket, and what the benchmarks
read off it (its RSS, one protocol v1 request's time to first chunk).  Every benchmark
module takes these from here (none imports another's ``__main__``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from appliance.model.engine.onnx import OnnxVoiceModel
    from appliance.voicetypes import Voice


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (NaN for none: a row with nothing measured)."""
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def start_daemon(
    out: Path,
    config: dict[str, Any] | None = None,
    *,
    entry: tuple[str, ...] = ("-m", "appliance.main"),
    env: dict[str, str] | None = None,
    timeout_s: float = 300.0,
    warm: bool = True,
) -> tuple[subprocess.Popen[bytes], str]:
    """``entry``: what runs ``serve`` (``bench.memprobe`` puts a candidate cut in front of
    ``appliance.main``); ``env``: added to this process's environment; ``timeout_s``: for
    the socket to accept (a first start cuts the voice before it listens); ``warm``: return
    only once the whole warm-up has run, as every bench measures the steady state (a long
    first sentence gets no quick start while the warm-up's later clauses hold the other
    worker: 150–190 ms to its first packet then, ~50 ms after)."""
    import yaml

    tmp = Path(tempfile.mkdtemp(prefix="ttsd-bench-"))
    sock = str(tmp / "ttsd.sock")
    cfg = {"engine": {"backend": "onnx-cpu"}, "playback": {"enabled": False}, **(config or {})}
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    log = (out / "daemon.log").open("ab")
    cmd = [sys.executable, *entry, "serve", "--socket", sock]
    cmd += ["--config", str(tmp / "config.yaml")]
    full_env = {**os.environ, **env} if env else None
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited ({proc.returncode}); see {out / 'daemon.log'}")
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            s.close()
        except OSError:
            time.sleep(0.1)
            continue
        if warm:
            wait_warm(sock, timeout_s)
        return proc, sock
    proc.kill()
    raise RuntimeError("daemon did not start")


def poll_until(
    sock: str, done: Callable[[Any], bool], what: str, timeout_s: float, every_s: float
) -> None:
    """Poll the daemon on one connection until ``done(client)``; past ``timeout_s``, fail
    saying it did not ``what``."""
    from appliance.clients.client import Client

    deadline = time.monotonic() + timeout_s
    with Client(sock) as client:
        while not done(client):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not {what}")
            time.sleep(every_s)


def wait_warm(sock: str, timeout_s: float = 300.0) -> None:
    """Until the whole warm-up has run (the later clause runs while the daemon is idle)."""

    def warm(client: Any) -> bool:
        h = client.health()
        return not h.get("starting") and h.get("warm_up") in ("done", None)

    poll_until(sock, warm, "finish its warm-up", timeout_s, 0.2)


def bundled_model() -> tuple[OnnxVoiceModel, Voice]:
    """The bundled voice in process, as the daemon cuts and caches it: its model (two
    threads) and the voice (info, paths)."""
    from appliance.model.engine.onnx import OnnxVoiceModel
    from appliance.model.voices import bundled_voice_path, load_voice
    from appliance.ops.paths import default_cache_dir

    voice = load_voice("en_US-joe-medium", bundled_voice_path(), default_cache_dir())
    model = OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.decoder_path,
        voice.cut,
        2,
        flow=voice.flow_split,
    )
    return model, voice


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def v1_request(client: Any, rid: int, text: str) -> tuple[float, dict[str, Any]]:
    """One protocol v1 synthesize: ms from sending it to its first chunk, and its ``end``."""
    first: float | None = None
    t0 = time.perf_counter()
    client.send({"op": "synthesize", "id": rid, "text": text})
    while True:
        ev = client.recv()
        if ev.get("event") == "chunk" and first is None:
            first = time.perf_counter() - t0
        elif ev.get("event") in ("end", "error"):
            if ev["event"] == "error" or first is None:
                raise RuntimeError(str(ev))
            return first * 1000, ev


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")
