"""The short command after a conversation's pause (issue 46, stops 64 and 68): the first
packet after :data:`QUIET_S` of quiet, from the bench's daemon (``engine.keep_warm_s`` at
its default, 30 s, since stop 68) and from a second one with ``keep_warm_s: 0``, in
interleaved blocks with piper-tts's first audio after the same quiet; and what keeping warm
costs, the bench's daemon's CPU over the quiet after a request (its ``/proc/PID/stat``
times).

Where the CPU slows while it idles (a VM's host, a power-saving governor) a first packet
after quiet waits far longer than one right after another (docs/speed.md, "Kept warm").
Run by :func:`bench.speed.bench_speed`; its table prints the rows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from appliance.ops.config import EngineConfig
from bench.rig import pct, proc_cpu_s, start_daemon

QUIET_S = 3.0
"""The pause before each request: a conversation's next turn."""


def kept_warm(
    out: Path,
    sock: str,
    pid: int,
    piper: Any,
    runs: int,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The first packets of the bench's daemon (``sock``, process ``pid``, kept warm as
    configured) and of one with ``keep_warm_s: 0``, and piper-tts's first audio, after
    :data:`QUIET_S` (``runs`` each, in two blocks); and the bench's daemon's CPU share
    while kept warm."""
    from bench.speed import SHORT, piper_ttfa_ms, ttfp_ms

    cfg = dict(config or {})
    keep_s = float(cfg.get("engine", {}).get("keep_warm_s", EngineConfig().keep_warm_s))
    cfg["engine"] = {**cfg.get("engine", {}), "keep_warm_s": 0.0}
    proc, off_sock = start_daemon(out, cfg)
    try:
        off: list[float] = []
        kept: list[float] = []
        theirs: list[float] = []
        for _ in range(2):
            off += ttfp_ms(off_sock, SHORT, max(1, runs // 2), QUIET_S)
            kept += ttfp_ms(sock, SHORT, max(1, runs // 2), QUIET_S)
            theirs += piper_ttfa_ms(piper, SHORT, max(1, runs // 2), QUIET_S)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ttfp_ms(sock, SHORT, 0)  # two requests (its warm-ups), then a quiet spell
    cpu0 = proc_cpu_s(pid)
    time.sleep(QUIET_S)
    share = (proc_cpu_s(pid) - cpu0) / QUIET_S
    piper_p50 = pct(theirs, 50)

    def row(ms: list[float]) -> dict[str, float]:
        return {
            "ttfp_p50_ms": pct(ms, 50),
            "ttfp_p95_ms": pct(ms, 95),
            "ratio": piper_p50 / pct(ms, 50),
        }

    return {
        "quiet_s": QUIET_S,
        "keep_s": keep_s,
        "piper_ttfa_p50_ms": piper_p50,
        "off": row(off),
        "kept": row(kept),
        "kept_cpu_share": share,
    }


def print_rows(r: dict[str, Any], goal: float) -> None:
    """The two rows of the speed table (``goal``: the short command's ratio)."""
    quiet, piper_ms = r["quiet_s"], r["piper_ttfa_p50_ms"]
    for key, label in (
        ("kept", f"short command after {quiet:.0f} s of quiet (kept warm {r['keep_s']:.0f} s)"),
        ("off", "the same, `engine.keep_warm_s: 0`"),
    ):
        x = r[key]
        cost = f" ({r['kept_cpu_share'] * 100:.0f} % of a core while kept)" if key == "kept" else ""
        print(
            f"| first packet, {label} (P50) | {x['ttfp_p50_ms']:.1f} ms "
            f"(P95 {x['ttfp_p95_ms']:.1f}){cost} | {piper_ms:.1f} ms | {x['ratio']:.2f}× "
            f"| ≥ {goal}× |"
        )
