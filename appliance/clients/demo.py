"""``make run``: start the daemon in the foreground and say a greeting.

The greeting goes through the speaker when the daemon has one; otherwise it
is written to ``greeting.wav``.  Ctrl-C stops the daemon cleanly (SIGINT is
passed on, and it finishes what it is doing).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from appliance.clients.client import Client, TtsdError

GREETING = "Hello! ttsd is up and running. Ask me to say something."


def _wait_for(path: str, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with Client(path, timeout=5) as c:
                return c.ping()
        except TtsdError:
            time.sleep(0.2)
    return False


def greet(path: str) -> None:
    with Client(path) as client:
        try:
            rid = client.next_id()
            client.send({"op": "speak", "id": rid, "text": GREETING, "priority": "important"})
            for ev in client.events(rid):
                if ev.get("event") == "started":
                    print(f"ttsd: speaking the greeting (first sound after {ev['latency_ms']} ms)")
            return
        except TtsdError as exc:
            if exc.code != "no_audio_device":
                raise
        result = client.synthesize_all(GREETING)
        out = Path("greeting.wav").resolve()
        result.write_wav(out)
        print(
            f"ttsd: no speaker here; greeting written to {out} "
            f"(first packet after {result.stats.get('ttfp_ms')} ms)"
        )


def main() -> int:
    sock = os.environ.get("TTSD_SOCKET") or str(
        Path(tempfile.mkdtemp(prefix="ttsd-")) / "ttsd.sock"
    )
    cmd = [sys.executable, "-m", "appliance.main", "serve", "--socket", sock]
    if os.environ.get("TTSD_CONFIG"):
        cmd += ["--config", os.environ["TTSD_CONFIG"]]
    print(f"ttsd: starting on {sock} (Ctrl-C to stop)", flush=True)
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        if not _wait_for(sock, proc):
            print("ttsd: the daemon did not start; see the log above", file=sys.stderr)
            return 1
        greet(sock)
        print(f"ttsd: try   TTSD_SOCKET={sock} .venv/bin/ttsctl say 'hello'", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        print("\nttsd: stopping", flush=True)
        proc.send_signal(signal.SIGINT)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
