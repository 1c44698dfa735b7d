"""Speed 1–4× (screen readers): length, intelligibility and first packet against espeak-ng,
and where the voice's own speed should end.

- **sweep**: the daemon at each speed against espeak-ng at the same speeds on the same
  sentences, same recogniser (pocketsphinx), same run: length × speed (goal 1 ± 0.05),
  WER as heard and slowed back to 1× with libsonic (the recogniser is trained on speech
  at a normal rate), first packet (goal at 3×: within 10 % of 1×), and the first packet
  of a 56-, 135- and 266-character first sentence at 1, 2 and 3×;
- **voice limit**: at total speeds 1.5–3×, the voice itself re-timed to 1–2× with libsonic
  stretching the rest to the same length: which share of the speed-up the voice should
  take (``appliance.model.stretch.VOICE_SPEED_LIMIT``), by WER.  In process, on the
  daemon's cached cut of the bundled voice.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.clients.client import Client
from bench.rig import bundled_model, start_daemon

SPEED_TEXTS = [
    "Please turn on the kitchen lights.",
    "The next train leaves from platform two in five minutes.",
    "Good morning, it is sunny and warm today.",
    "Open the file menu and choose save as.",
    "There are three new messages in your inbox.",
    "Your battery is low, please connect the charger.",
]
SPEEDS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
LENGTH_TEXTS = {
    "56 chars": SPEED_TEXTS[1],
    "135 chars": (
        "The quarterly report shows that revenue grew by twelve percent, driven mostly by "
        "strong sales in the northern region and new customers."
    ),
    "266 chars": (
        "The committee met on a cold and windy morning to review the proposal for the new "
        "library building which would replace the old structure that had stood in the town "
        "square for more than one hundred years and had become far too small for the "
        "growing number of students."
    ),
}
"""First packet by a first sentence's length: a long one starts quick at any speed."""
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
                    firsts.append(_first_packet_ms(c, SPEED_TEXTS[1], speed))
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
            by_length = _first_by_length(c, runs)
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
    from appliance.model.stretch import VOICE_SPEED_LIMIT

    print(
        f"\n## Speed sweep: ttsd (re-timed, stretched past {VOICE_SPEED_LIMIT:g}x) vs espeak-ng, "
        "same sentences\n"
    )
    print(
        "| who | speed | duration × speed (goal 1 ± 0.05) | WER | WER slowed back to 1x "
        "| first packet |\n|---|---|---|---|---|---|"
    )
    for row in rows:
        fp = f"{row['first_packet_ms']} ms" if row["first_packet_ms"] is not None else "—"
        print(
            f"| {row['who']} | {row['speed']:g}x | {row['duration_x_speed']} | {row['wer']} "
            f"| {row['wer_slowed']} | {fp} |"
        )
    print("\n| first sentence | " + " | ".join(f"{sp:g}x" for sp in (1.0, 2.0, 3.0)) + " |")
    print("|---|---|---|---|")
    for name, row in by_length.items():
        print(f"| {name} | " + " | ".join(f"{ms:.1f} ms" for ms in row.values()) + " |")
    return {"rows": rows, "first_packet_by_length": by_length}


def _first_packet_ms(c: Client, text: str, speed: float) -> float:
    """Milliseconds from asking to the first chunk (the request read to its end)."""
    t0 = time.perf_counter()
    first: float | None = None
    for ev in c.synthesize(text, format="s16le", speed=speed):
        if ev["event"] == "chunk" and first is None:
            first = (time.perf_counter() - t0) * 1000
    if first is None:
        raise RuntimeError(f"no audio for {text!r} at {speed}x")
    return first


def _first_by_length(c: Client, runs: int) -> dict[str, dict[str, float]]:
    """First packet P50 of each of :data:`LENGTH_TEXTS` at 1, 2 and 3x (after one run
    each that is not counted)."""
    out: dict[str, dict[str, float]] = {}
    for name, text in LENGTH_TEXTS.items():
        out[name] = {}
        for speed in (1.0, 2.0, 3.0):
            firsts = [_first_packet_ms(c, text, speed) for _ in range(runs + 1)]
            out[name][f"{speed:g}x"] = round(float(np.median(firsts[1:])), 1)
    return out


VOICE_SHARES = (1.0, 1.25, 1.5, 1.75, 2.0)
LIMIT_SPEEDS = (1.5, 2.0, 3.0)
LIMIT_TEXTS = [
    *SPEED_TEXTS,
    "The committee met on a cold and windy morning to review the proposal for the new library.",
]


class _VoiceAt:
    """The bundled voice in process (the daemon's cached cut), speaking a text with the
    voice itself re-timed to one speed and libsonic stretching the rest to another."""

    def __init__(self) -> None:
        from appliance.text.phonemize import Phonemizer

        self.model, voice = bundled_model()
        self.phonemizer = Phonemizer(voice.info)
        self.defaults = voice.info

    def speak(self, text: str, speed: float, voice_share: float, seed: int) -> np.ndarray:
        from appliance.model.engine.base import Scales, Window
        from appliance.model.stretch import Stretcher
        from appliance.text.frontend import FrontendLimits, prepare

        info, parts, base, got = self.defaults, [], 0.0, 0.0
        for clause in prepare(text, "en_US", FrontendLimits(20000, 400)):
            ids = self.phonemizer.ids(clause.text)
            scales = Scales(
                info.noise_scale, info.length_scale, info.noise_w, seed=seed, rate=voice_share
            )
            enc = self.model.encode(ids, scales, None)
            base += enc.base_frames or float(enc.durations.sum())
            got += float(enc.durations.sum())
            parts.append(self.model.decode(Window(enc.z, enc.g)))
        audio = np.concatenate(parts)
        factor = speed * got / base
        if factor > 1.001:
            s = Stretcher(22050, factor)
            audio = np.concatenate([s.process(audio), s.flush()])
        return audio


def bench_voice_limit(quick: bool) -> dict[str, Any]:
    """WER at each total speed with the voice taking each share of it (same lengths)."""
    voice = _VoiceAt()
    # pocketsphinx's WER moves by ~0.05 between noise seeds: fewer than 4 cannot rank the
    # shares at all.
    seeds = range(4 if quick else 8)
    rows = []
    for speed in LIMIT_SPEEDS:
        for share in (s for s in VOICE_SHARES if s <= speed):
            e = n = eb = nb = 0
            for seed in seeds:
                for t in LIMIT_TEXTS:
                    r = _wer(voice.speak(t, speed, share, seed), t, speed)
                    e, n, eb, nb = e + r[0], n + r[1], eb + r[2], nb + r[3]
            rows.append({"speed": speed, "voice": share, "wer": e / n, "wer_slowed": eb / nb})
    print("\n## Where the voice's own speed should end (the rest time-stretched)\n")
    print(
        f"{len(LIMIT_TEXTS)} sentences × {len(seeds)} noise seeds, pocketsphinx (differences "
        "under ~0.05 are noise).\n"
    )
    print("| total speed | voice re-timed to | WER | WER slowed back to 1x |\n|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['speed']:g}x | {row['voice']:g}x | {row['wer']:.3f} "
            f"| {row['wer_slowed']:.3f} |"
        )
    return {"rows": rows}
