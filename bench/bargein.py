"""The cancel tail on protocol v1 (issue 45, part 3): a client cancels a long request after
its first chunks; how much audio still reaches it after the cancel was sent (the bytes in
flight: the daemon sends nothing made after the cancel arrived), how long until the last
of it, and how long until ``end``.  Real-time (``realtime: true``) and as-fast-as-read.

    python -m bench.bargein [--runs N] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from appliance.clients.client import Client
from bench.rig import start_daemon

TEXT = (
    "Our records show that the parcel left the depot this morning and is now on its way. "
    "The driver expects to reach your street between two and four in the afternoon, and "
    "you will get a message about half an hour before the van arrives at your door."
)


def one(client: Client, rid: int, after_chunks: int, realtime: bool) -> dict[str, float]:
    client.send(
        {"op": "synthesize", "id": rid, "text": TEXT, "realtime": realtime, "word_timings": True}
    )
    seen = 0
    t_cancel = t_last = 0.0
    after_ms = after_bytes = 0.0
    while True:
        ev = client.recv()
        if ev.get("id") != rid:
            continue
        if ev["event"] == "chunk":
            seen += 1
            if t_cancel:
                after_ms += ev["duration_ms"]
                after_bytes += len(ev["audio"])
                t_last = time.perf_counter()
            elif seen == after_chunks:
                client.send({"op": "cancel", "id": rid + 100000, "target": rid})
                t_cancel = time.perf_counter()
        elif ev["event"] in ("end", "error"):
            t_end = time.perf_counter()
            return {
                "audio_after_ms": after_ms,
                "bytes_after": after_bytes,
                "last_audio_ms": (t_last - t_cancel) * 1000 if t_last else 0.0,
                "end_ms": (t_end - t_cancel) * 1000,
            }


def bench_bargein(out: Path, runs: int = 10) -> dict[str, Any]:
    proc, sock = start_daemon(out)
    result: dict[str, Any] = {}
    try:
        with Client(sock) as client:
            for realtime in (True, False):
                rows = [one(client, k + 1, 3, realtime) for k in range(runs)]
                result["realtime" if realtime else "as_fast_as_read"] = {
                    key: (statistics.median(r[key] for r in rows), max(r[key] for r in rows))
                    for key in rows[0]
                }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("\n## Cancel tail, protocol v1 (median, max over runs)\n")
    print("| request | audio after the cancel | bytes | last audio after | end after |")
    print("|---|---|---|---|---|")
    for name, r in result.items():
        cells = " | ".join(f"{m:.0f} / {x:.0f}" for m, x in r.values())
        print(f"| {name} | {cells} |")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.bargein")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bench_bargein(args.out, args.runs)
