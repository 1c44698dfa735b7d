"""What a request whose client leaves mid-stream leaves behind in the daemon.

``python -m bench.drops [--requests 100] [--out bench-out]`` (or ``python -m bench --only
drops``): one daemon (``bench.rig.start_daemon``, the bundled voice, after its warm-up),
one client, short requests (:data:`bench.memory.MIX`'s first kind, read as fast as they
come), three runs of ``requests``: requests that finish, each on a connection of its own;
requests whose client drops its connection after the first chunk; requests that finish
again.  Each run reads the RSS the daemon keeps once it has trimmed
(:class:`bench.memory.MixedLoad`) after :data:`WARM_IN` requests and after the rest.

Why: stop 66 found ~60–80 KB of heap kept per dropped request, given back only once later
requests' allocations set off a collection: each dropped connection was left in reference
cycles (its write error's traceback, the frames holding its last audio) that an idle
daemon never collected.  The upkeep's trim collects them now (docs/speed.md, stop 66),
and most of those cycles are broken where they form (stop 67); this table says whether a
drop still leaves anything.

Bounds: 3 × (``requests`` + :data:`WARM_IN`) requests of ~1.5 s of audio each; about four
minutes at 100.  JSON in ``OUT/drops.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.memory import MIX, SETTLE_S, MixedLoad, one_request, request_for
from bench.rig import start_daemon

WARM_IN = 10
"""Requests of each kind before the first read: the first few after a start move the heap
for reasons of their own (first shapes, first trims)."""


def _short(k: int) -> tuple[str, dict[str, Any]]:
    return request_for(k * len(MIX))  # the first kind: a short command, default options


def _dropped(client: Any, k: int) -> tuple[Any, str]:
    return one_request(client, k, True, _short)


def _finished(client: Any, k: int) -> tuple[Any, str]:
    """A finished request on a connection of its own: a drop is also a new connection."""
    from appliance.clients.client import Client

    client, outcome = one_request(client, k, False, _short)
    client.close()
    return Client(client.path), outcome


RUNS: dict[str, tuple[Callable[[Any, int], tuple[Any, str]], str]] = {
    "finished": (_finished, "that finish, each on a new connection"),
    "dropped": (_dropped, "whose client leaves after the first chunk"),
    "finished after": (_finished, "that finish, after those"),
}
"""Each run's requests, in order, and its row."""


def drop_growth(out: Path, requests: int = 100, settle_s: float = SETTLE_S) -> dict[str, Any]:
    """Kept RSS before and after each of :data:`RUNS`, ``requests`` each."""
    proc, sock = start_daemon(out)
    try:
        result: dict[str, Any] = {"requests": requests}
        for name, (one, _) in RUNS.items():
            load = MixedLoad(sock, proc.pid, clients=1, settle_s=settle_s, one=one)
            load.run(WARM_IN + requests, {WARM_IN, WARM_IN + requests})
            (_, before), (_, after) = sorted(load.kept)
            result[name] = {
                "kept_mb": [before, after],
                "per_100_mb": round((after - before) * 100 / requests, 2),
                "outcomes": dict(load.outcomes),
            }
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def format_drops(r: dict[str, Any]) -> str:
    n = r["requests"]
    rows = [
        "| short requests, one client | kept RSS (MB) | per 100 requests |",
        "|---|---|---|",
    ]
    for name, (_, what) in RUNS.items():
        d = r[name]
        before, after = d["kept_mb"]
        rows.append(f"| {n} {what} | {before} → {after} | {d['per_100_mb']:+.2f} MB |")
    return "\n".join(rows)


def bench_drops(out: Path, requests: int = 100) -> dict[str, Any]:
    r = drop_growth(out, requests)
    print("\n## What a dropped request leaves behind (issue 46)\n")
    print(format_drops(r))
    (out / "drops.json").write_text(json.dumps(r, indent=1))
    return r


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drops", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    bench_drops(args.out, args.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
