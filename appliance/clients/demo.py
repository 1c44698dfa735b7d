"""``make run``: start the daemon in the foreground and say a greeting.

The greeting goes through the speaker when the daemon has one; otherwise it is written
to ``greeting.wav``.  The demo waits until ``ping`` says the daemon is warm (its voices'
first packets warmed, its speaker running or known missing), so the greeting is as quick
as any later request.  The closing hint is one that works on this box: ``ttsctl say`` with
a speaker, ``ttsctl synth -o`` without.

Ctrl-C stops the daemon (SIGINT is passed on: while it starts it stops at once with one
line, once serving it finishes what it is doing) and exits 130.  The daemon's socket lives
in a temporary directory of the demo's own, removed when the demo ends, Ctrl-C included.
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
START_TIMEOUT_S = 300.0
"""A first start cuts the voice (seconds to a minute on a slow box)."""


def _wait_until_warm(path: str, proc: subprocess.Popen[bytes]) -> bool:
    """Until ``ping`` answers ``warm`` (False when the daemon exits or takes too long)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with Client(path, timeout=5) as c:
                if c.request("ping").get("warm", True):
                    return True
        except TtsdError:
            pass  # not listening yet
        time.sleep(0.05)
    return False


def greet(path: str) -> bool:
    """Say the greeting; True when it went through the speaker, False when there is none
    (then it is written to ``greeting.wav``)."""
    with Client(path) as client:
        try:
            rid = client.next_id()
            client.send({"op": "speak", "id": rid, "text": GREETING, "priority": "important"})
            for ev in client.events(rid):
                if ev.get("event") == "started":
                    print(f"ttsd: speaking the greeting (first sound after {ev['latency_ms']} ms)")
            return True
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
        return False


def hint(sock: str, spoke: bool) -> str:
    """What to try next, in a form that works on this box."""
    ctl = f"TTSD_SOCKET={sock} .venv/bin/ttsctl"
    if spoke:
        return f"ttsd: try   {ctl} say 'hello'"
    return f"ttsd: try   {ctl} synth 'hello' -o hello.wav"


def run(sock: str) -> int:
    cmd = [sys.executable, "-m", "appliance.main", "serve", "--socket", sock]
    if os.environ.get("TTSD_CONFIG"):
        cmd += ["--config", os.environ["TTSD_CONFIG"]]
    print(f"ttsd: starting on {sock} (Ctrl-C to stop)", flush=True)
    # A session of its own: Ctrl-C reaches the demo only, which passes it on once.
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        if not _wait_until_warm(sock, proc):
            print("ttsd: the daemon did not start; see the log above", file=sys.stderr)
            return 1
        print(hint(sock, greet(sock)), flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: no traceback
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=60)
        return 130 if status in (0, 130) else status
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> int:
    if os.environ.get("TTSD_SOCKET"):
        return run(os.environ["TTSD_SOCKET"])
    with tempfile.TemporaryDirectory(prefix="ttsd-") as d:
        return run(str(Path(d) / "ttsd.sock"))


if __name__ == "__main__":
    sys.exit(main())
