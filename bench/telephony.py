"""Paced output (``pace_ms``): frame jitter measured from outside, at 1 and 8 streams.

Each stream is one protocol-v1 connection in its own client thread asking for 8 kHz μ-law
in 20 ms frames; every frame's arrival time is taken as the client reads it.  A frame's
jitter is its arrival minus its ideal time: the first paced frame's arrival (the one after
the 40 ms start buffer) plus ``k · 20 ms``.  Reported: P50 and P99 of |jitter| over every
paced frame of every stream ("vs schedule": a frame the daemon sent late moves every
later one, as the schedule restarts from it), the interval jitter |Δt − 20 ms| between
consecutive frames (what a far end's jitter buffer absorbs), the frames' sizes, and the
frames the daemon counted late.  Goal: P99 ≤ 5 ms with 8 streams.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.clients.client import Client
from bench.rig import start_daemon

TEXT = (
    "Thank you for calling. All of our agents are busy helping other customers right now. "
    "Please stay on the line and your call will be answered in the order it was received."
)
PACE_MS = 20
BUFFER_FRAMES = 2  # appliance.doors.pace.START_BUFFER_MS / PACE_MS


def one_stream(sock: str, out: dict[str, Any]) -> None:
    arrivals: list[float] = []
    sizes: set[int] = set()
    with Client(sock) as c:
        for ev in c.synthesize(TEXT, format="mulaw", pace_ms=PACE_MS):
            if ev["event"] == "chunk":
                arrivals.append(time.monotonic())
                sizes.add(len(ev["audio"]))
            elif ev["event"] == "end":
                out["late"] = ev["stats"].get("paced_late", 0)
    t = np.asarray(arrivals[BUFFER_FRAMES:])
    ideal = t[0] + PACE_MS / 1000.0 * np.arange(len(t))
    out["jitter_ms"] = list(np.abs(t - ideal) * 1000.0)
    out["gap_ms"] = list(np.abs(np.diff(t) - PACE_MS / 1000.0) * 1000.0)
    out["frames"] = len(arrivals)
    out["sizes"] = sorted(sizes)


def run_level(sock: str, streams: int) -> dict[str, Any]:
    results: list[dict[str, Any]] = [{} for _ in range(streams)]
    threads = [threading.Thread(target=one_stream, args=(sock, results[i])) for i in range(streams)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    jitter = [j for r in results for j in r.get("jitter_ms", [])]
    gaps = [j for r in results for j in r.get("gap_ms", [])]
    return {
        "streams": streams,
        "frames": sum(r.get("frames", 0) for r in results),
        "sizes": sorted({s for r in results for s in r.get("sizes", [])}),
        "late": sum(r.get("late", 0) for r in results),
        "p50_ms": round(float(np.percentile(jitter, 50)), 3),
        "p99_ms": round(float(np.percentile(jitter, 99)), 3),
        "max_ms": round(float(np.max(jitter)), 3),
        "gap_p50_ms": round(float(np.percentile(gaps, 50)), 3),
        "gap_p99_ms": round(float(np.percentile(gaps, 99)), 3),
    }


def bench_pacing(out: Path, quick: bool) -> dict[str, Any]:
    proc, sock = start_daemon(out)
    try:
        with Client(sock) as c:  # warm
            c.synthesize_all("Hello.")
        rows = [run_level(sock, n) for n in (1, 8) for _ in range(1 if quick else 2)]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("\n## Paced output: 8 kHz μ-law, 20 ms frames (goal P99 ≤ 5 ms at 8 streams)\n")
    print(
        "| streams | frames | sizes | late | vs schedule P50 | P99 | max "
        "| interval jitter P50 | P99 |\n|---|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['streams']} | {r['frames']} | {r['sizes']} | {r['late']} "
            f"| {r['p50_ms']} ms | {r['p99_ms']} ms | {r['max_ms']} ms "
            f"| {r['gap_p50_ms']} ms | {r['gap_p99_ms']} ms |"
        )
    return {"levels": rows}
