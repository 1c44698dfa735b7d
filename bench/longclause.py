"""One long clause, and what it costs the daemon's memory (issue 42): an 8 000-symbol
``<phoneme>`` (about 200 s of audio in one clause) or 2 000 characters with no stop,
synthesized once by a fresh daemon; its resident memory (VmRSS) and high-water mark
(VmHWM) idle, then after the request.

    python -m bench.longclause [--phoneme] [--out DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from appliance.clients.client import Client
from bench.rig import start_daemon

PHONEME = '<speak><phoneme alphabet="ipa" ph="' + "həlˈoʊ " * 1150 + '">x</phoneme></speak>'
RUN_ON = ("word and " * 250).strip()


def _status_mb(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmHWM", "VmRSS")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def bench_longclause(out: Path, phoneme: bool = True) -> dict[str, Any]:
    config = {"limits": {"max_text_chars": 20000}, "scheduler": {"admission_max_load": 8.0}}
    proc, sock = start_daemon(out, config)
    try:
        with Client(sock) as client:
            while client.health().get("warm_up") not in ("done", None):
                time.sleep(0.5)
        idle = _status_mb(proc.pid)
        text = PHONEME if phoneme else RUN_ON
        with Client(sock) as client:
            fmt = "ssml" if phoneme else "text"
            r = client.synthesize_all(text, text_format=fmt, noise_scale=0.0, noise_w=0.0)
        after = _status_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    result = {
        "audio_s": len(r.audio) / 2 / 22050,
        "idle_rss_mb": idle["VmRSS"],
        "peak_over_idle_mb": after["VmHWM"] - idle["VmRSS"],
        "kept_over_idle_mb": after["VmRSS"] - idle["VmRSS"],
    }
    print(
        f"\n## One long clause ({'<phoneme>' if phoneme else 'no stop'}, "
        f"{result['audio_s']:.0f} s of audio)\n\nidle {result['idle_rss_mb']:.0f} MB; peak "
        f"+{result['peak_over_idle_mb']:.0f} MB, kept +{result['kept_over_idle_mb']:.0f} MB"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.longclause")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--phoneme", action="store_true", help="the <phoneme> clause")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bench_longclause(args.out, args.phoneme)
