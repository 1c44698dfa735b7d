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


# ---------------------------------------------------------------- speed sweep (screen readers)

SPEED_TEXTS = [
    "Please turn on the kitchen lights.",
    "The next train leaves from platform two in five minutes.",
    "Good morning, it is sunny and warm today.",
    "Open the file menu and choose save as.",
    "There are three new messages in your inbox.",
    "Your battery is low, please connect the charger.",
]
SPEEDS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
ESPEAK_WPM = 175
"""espeak-ng's default rate (-s): speed s is -s 175·s (espeak-ng stretches past ~450 with
libsonic itself)."""


def _espeak(text: str, speed: float) -> np.ndarray:
    import subprocess
    import tempfile

    import soundfile
    import soxr

    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        cmd = ["espeak-ng", "-s", str(round(ESPEAK_WPM * speed)), "-w", f.name, text]
        subprocess.run(cmd, check=True, capture_output=True)
        a, rate = soundfile.read(f.name, dtype="float32")
    return np.asarray(soxr.resample(a, rate, 22050), dtype=np.float32)


def _wer(audio: np.ndarray, text: str, speed: float) -> tuple[int, int, int, int]:
    """(errors, words) heard as it is, and slowed back to 1x with libsonic (pocketsphinx
    is trained on speech at a normal rate: raw fast speech mostly measures that)."""
    from appliance.model.stretch import Stretcher
    from tests.asr import recognize, word_errors

    def heard(a: np.ndarray) -> tuple[int, int]:
        return word_errors(text, recognize((np.clip(a, -1, 1) * 32767).astype(np.int16), 22050))

    back = Stretcher(22050, 1.0 / speed)
    slowed = np.concatenate([back.process(audio), back.flush()])
    return (*heard(audio), *heard(slowed))


def bench_speed_sweep(out: Path, quick: bool) -> dict[str, Any]:
    """Speed 1-4x: duration ratio (vs 1/speed), WER (raw and slowed back), first packet;
    espeak-ng at the same speeds on the same sentences, same recogniser, same run."""
    proc, sock = start_daemon(out)
    rows: list[dict[str, Any]] = []
    try:
        with Client(sock) as c:
            c.synthesize_all("Hello.")
            base = {t: len(c.synthesize_all(t, format="f32le").audio) // 4 for t in SPEED_TEXTS}
            runs = 3 if quick else 10
            for speed in SPEEDS:
                e = n = eb = nb = 0
                ratios, firsts = [], []
                for t in SPEED_TEXTS:
                    syn = c.synthesize_all(t, format="f32le", speed=speed)
                    a = np.frombuffer(syn.audio, "<f4")
                    ratios.append(len(a) / base[t] * speed)
                    r = _wer(a, t, speed)
                    e, n, eb, nb = e + r[0], n + r[1], eb + r[2], nb + r[3]
                for _ in range(runs):
                    t0 = time.perf_counter()
                    first: float | None = None
                    for ev in c.synthesize(SPEED_TEXTS[1], format="s16le", speed=speed):
                        if ev["event"] == "chunk" and first is None:
                            first = (time.perf_counter() - t0) * 1000
                    if first is not None:
                        firsts.append(first)
                rows.append(
                    {
                        "who": "ttsd",
                        "speed": speed,
                        "duration_x_speed": round(float(np.mean(ratios)), 3),
                        "wer": round(e / n, 3),
                        "wer_slowed": round(eb / nb, 3),
                        "first_packet_ms": round(float(np.median(firsts)), 1),
                    }
                )
        ebase = {t: len(_espeak(t, 1.0)) for t in SPEED_TEXTS}
        for speed in SPEEDS:
            e = n = eb = nb = 0
            ratios = []
            for t in SPEED_TEXTS:
                a = _espeak(t, speed)
                ratios.append(len(a) / ebase[t] * speed)
                r = _wer(a, t, speed)
                e, n, eb, nb = e + r[0], n + r[1], eb + r[2], nb + r[3]
            rows.append(
                {
                    "who": "espeak-ng",
                    "speed": speed,
                    "duration_x_speed": round(float(np.mean(ratios)), 3),
                    "wer": round(e / n, 3),
                    "wer_slowed": round(eb / nb, 3),
                    "first_packet_ms": None,
                }
            )
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("\n## Speed sweep: ttsd (time-stretch past 2x) vs espeak-ng, same sentences\n")
    print(
        "| who | speed | duration × speed (goal 1 ± 0.05) | WER | WER slowed back to 1x "
        "| first packet |\n|---|---|---|---|---|---|"
    )
    for r in rows:
        fp = f"{r['first_packet_ms']} ms" if r["first_packet_ms"] is not None else "—"
        print(
            f"| {r['who']} | {r['speed']:g}x | {r['duration_x_speed']} | {r['wer']} "
            f"| {r['wer_slowed']} | {fp} |"
        )
    return {"rows": rows}
