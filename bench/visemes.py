"""What visemes cost the first packet (issue 45 part 4; goal: +0.5 ms or less).

The word-timings bench's pairs (:func:`bench.wordtimes.socket_cost`) with ``visemes``
instead: per text, requests without and with ``visemes``, interleaved, each first in turn,
each cancelled at its first chunk; the P50 of the pairs' differences at the client and by
the daemon's ttfp, and the daemon's own count of the work its first packet waited for
(``end``'s ``ttfp_parts_ms.visemes``: the first chunk's shapes, made and cut on the loop).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.rig import start_daemon
from bench.wordtimes import socket_cost


def bench_visemes(out: Path, runs: int, texts: dict[str, str]) -> dict[str, Any]:
    proc, sock = start_daemon(out)
    try:
        return {"socket": socket_cost(sock, texts, runs, field="visemes", part="visemes")}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def print_visemes(r: dict[str, Any]) -> None:
    print("\n## Visemes: first packet cost (goal ≤ +0.5 ms)\n")
    print(
        "| text | off P50 ms | on P50 ms | Δ P50, paired at the client (pairs) "
        "| Δ P50, paired, daemon's ttfp | viseme work, daemon (P50 / P90 / max) |"
    )
    print("|---|---|---|---|---|---|")
    for name, row in r["socket"].items():
        print(
            f"| {name} | {row['off_p50']:.2f} | {row['on_p50']:.2f} "
            f"| {row['paired_p50']:+.2f} ({row['pairs']}) | {row['paired_daemon_p50']:+.2f} "
            f"| {row['words_p50']:.3f} / {row['words_p90']:.3f} / {row['words_max']:.3f} |"
        )
