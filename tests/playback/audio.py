"""Helpers for the playback tests: waiting for the stream, test tones, spectra."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from appliance.ops.config import PlaybackConfig
from appliance.playback import Player


def wait_flowing(player: Player, timeout: float = 10.0) -> None:
    """Until the stream calls back steadily (ALSA's pulse plugin may pause ~2 s at open)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = player.stats()["callbacks"]
        time.sleep(0.1)
        if player.stats()["callbacks"] - before >= 10:
            return
    raise AssertionError(f"the output stream never started: {player.health()}")


def make_config(**overrides: object) -> PlaybackConfig:
    base: dict[str, object] = {"reopen_min_s": 0.1, "reopen_max_s": 0.5}
    base.update(overrides)
    return PlaybackConfig(**base)  # type: ignore[arg-type]


def tone(
    freq: float, seconds: float, rate: int = 22050, amp: float = 0.3
) -> npt.NDArray[np.float32]:
    t = np.arange(int(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def push_all(utt: object, audio: npt.NDArray[np.float32], chunk: int = 2205) -> None:
    """Push in ~100 ms chunks, as the synthesis stream does, then finish."""
    for i in range(0, len(audio), chunk):
        utt.push(audio[i : i + chunk])  # type: ignore[attr-defined]
    utt.finish()  # type: ignore[attr-defined]


def best_alignment(
    recording: npt.NDArray[np.float32], reference: npt.NDArray[np.float32]
) -> tuple[int, float]:
    """Lag of ``reference`` inside ``recording`` maximising the normalised correlation,
    and that correlation (the recording's energy is normalised per lag, so a louder
    stretch elsewhere cannot win)."""
    rec = recording.astype(np.float64)
    ref = reference.astype(np.float64)
    m = len(ref)
    n = len(rec) + m
    size = 1 << (n - 1).bit_length()
    spec = np.fft.rfft(rec, size) * np.conj(np.fft.rfft(ref, size))
    corr = np.fft.irfft(spec, size)[: len(rec) - m + 1]
    energy = np.concatenate(([0.0], np.cumsum(rec**2)))
    local = np.sqrt(np.maximum(energy[m:] - energy[:-m], 1e-12))
    ncc = corr / (local * max(float(np.linalg.norm(ref)), 1e-12))
    lag = int(np.argmax(ncc))
    return lag, float(ncc[lag])


def tone_sequence(
    x: npt.NDArray[np.float32], rate: int, freqs: list[float], win_s: float = 0.02
) -> list[float]:
    """The tones heard, in order: the dominant known frequency of each loud window,
    with repeats collapsed."""
    win = int(win_s * rate)
    t = np.arange(win) / rate
    probes = {f: np.exp(-2j * np.pi * f * t) for f in freqs}
    out: list[float] = []
    for i in range(0, len(x) - win, win):
        w = x[i : i + win]
        if np.sqrt(np.mean(w**2)) < 0.05:
            continue
        f = max(freqs, key=lambda f: abs(np.dot(w, probes[f])))
        if not out or out[-1] != f:
            out.append(f)
    return out


def windowed_match(
    recording: npt.NDArray[np.float32],
    reference: npt.NDArray[np.float32],
    start: int,
    rate: int,
    win_s: float = 0.1,
    slack_s: float = 0.06,
) -> tuple[list[float], int]:
    """Normalised correlation of each loud window of ``reference`` with the recording,
    each window aligned on its own within ``slack_s`` of the previous window's lag.

    An underrun on the way to the sink inserts a gap (or drops a little) and shifts
    everything after it; a single global alignment would then fail although every piece
    arrived intact.  A window that only matches as two pieces at different lags holds such
    a discontinuity: it is counted, not scored.  Returns (scores, windows with a gap)."""
    win, slack = int(win_s * rate), int(slack_s * rate)
    lag = start
    out: list[float] = []
    gaps = 0
    for i in range(0, len(reference) - win, win):
        seg = reference[i : i + win]
        if np.sqrt(np.mean(seg**2)) < 0.02:
            continue
        lo = max(0, lag + i - slack)
        region = recording[lo : lag + i + win + slack]
        if len(region) < win:
            out.append(0.0)
            continue
        off, ncc = best_alignment(region, seg)
        if ncc < 0.9 and _split_matches(region, seg):
            gaps += 1  # a discontinuity: both sides of it arrived intact, shifted
            continue
        lag = lo + off - i
        out.append(ncc)
    return out, gaps


def _split_matches(region: npt.NDArray[np.float32], seg: npt.NDArray[np.float32]) -> bool:
    """Whether ``seg`` is two pieces that each match ``region`` at their own lag."""
    for k in range(1, 8):
        cut = len(seg) * k // 8
        if all(best_alignment(region, part)[1] >= 0.9 for part in (seg[:cut], seg[cut:])):
            return True
    return False
