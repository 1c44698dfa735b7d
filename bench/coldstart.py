"""First-packet latency of requests sent the moment a fresh daemon's socket accepts,
against the same requests sent once it is warm (issue 42, item 1).

    python -m bench.coldstart [--runs N] [--config FILE] [--tree DIR]

``--tree``: the checkout whose daemon runs (default: this one), for a before/after pair.

Each run starts a fresh ``ttsd serve`` (the voice's cut cached by a first start), and:

- ``cold``: the moment a connect succeeds, N requests (1, then 8 on another fresh
  daemon) are sent at once, each on its own connection;
- ``warm``: on a daemon whose ``health`` says ``starting: false``, after one more second,
  the same N requests.

For each request it reports the time from sending to the first ``chunk``, and for the
cold ones also when ``health`` first said warm (``warm_at``, from the socket accepting),
so "first packet no later than warm-up left plus a warm request" can be read off.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from appliance.clients.client import Client, TtsdError, decoder, encode

TEXT = "Turn the kitchen lights off, please."


def _start(
    workdir: Path, config: str | None, tree: str | None
) -> tuple[subprocess.Popen[bytes], str, Path]:
    sock = str(workdir / "ttsd.sock")
    log = workdir / "daemon.log"
    cmd = [sys.executable, "-m", "appliance.main", "serve", "--socket", sock]
    if config:
        cmd += ["--config", config]
    env = {**os.environ, "PYTHONPATH": tree} if tree else None
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tree, env=env)
    return proc, sock, log


def _accepting(sock: str, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> float:
    """Poll connect() until it succeeds; the monotonic time it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(sock)
            return time.monotonic()
        except OSError:
            time.sleep(0.002)
        finally:
            s.close()
    raise RuntimeError("daemon did not listen")


def _first_packet(sock: str, go: threading.Event, out: list[float | None], i: int) -> None:
    """ms from sending to the first chunk; None when the daemon said ``busy``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(sock)
    unpacker = decoder()
    go.wait()
    t0 = time.monotonic()
    s.sendall(encode({"op": "synthesize", "id": 1, "text": TEXT}))
    try:
        while True:
            data = s.recv(1 << 16)
            if not data:
                raise RuntimeError("closed")
            unpacker.feed(data)
            for ev in unpacker:
                if ev.get("event") == "chunk":
                    out[i] = (time.monotonic() - t0) * 1000
                    return
                if ev.get("event") == "error" and ev.get("code") == "busy":
                    out[i] = None
                    return
                if ev.get("event") == "error":
                    raise RuntimeError(str(ev))
    finally:
        s.close()


def _burst(sock: str, n: int) -> list[float | None]:
    out: list[float | None] = [None] * n
    go = threading.Event()
    threads = [threading.Thread(target=_first_packet, args=(sock, go, out, i)) for i in range(n)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    return out


def _warm_at(sock: str, t_up: float) -> float:
    """ms from ``t_up`` until health says the daemon is warm (polled each 10 ms)."""
    while True:
        try:
            with Client(sock, timeout=30) as c:
                h = c.health()
            if not h.get("starting", False) and h.get("warm", True):
                return (time.monotonic() - t_up) * 1000
        except TtsdError:
            pass
        time.sleep(0.01)


def one_run(n: int, cold: bool, config: str | None, tree: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="coldstart-") as d:
        proc, sock, log = _start(Path(d), config, tree)
        try:
            t_up = _accepting(sock, proc)
            warm_at: list[float] = []
            if cold:
                watcher = threading.Thread(target=lambda: warm_at.append(_warm_at(sock, t_up)))
                watcher.start()
                lat = _burst(sock, n)
                watcher.join()
            else:
                warm_at.append(_warm_at(sock, t_up))
                time.sleep(1.0)
                lat = _burst(sock, n)
            return {"lat": lat, "warm_at": warm_at[0]}
        finally:
            proc.terminate()
            proc.wait(30)
            if os.environ.get("COLDSTART_LOG"):
                print(log.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.coldstart")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--config")
    p.add_argument("--tree")
    args = p.parse_args(argv)
    one_run(1, False, args.config, args.tree)  # the voice's cut cached before any timing
    print(f"{'n':>2} {'when':<5} {'P50 ms':>7} {'max ms':>7} {'busy':>4} {'warm_at ms':>10}")
    for n in (1, 8):
        for cold in (True, False):
            lats: list[float] = []
            busy = 0
            warm: list[float] = []
            for _ in range(args.runs):
                r = one_run(n, cold, args.config, args.tree)
                lats += [x for x in r["lat"] if x is not None]
                busy += sum(x is None for x in r["lat"])
                warm.append(r["warm_at"])
            when = "cold" if cold else "warm"
            p50 = statistics.median(lats) if lats else float("nan")
            print(
                f"{n:>2} {when:<5} {p50:7.0f} {max(lats, default=float('nan')):7.0f} {busy:>4}"
                f" {statistics.median(warm):10.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
