"""Helpers for the playback tests: waiting for the stream, test tones, and matching what
the sink recorded against what was pushed (across the underruns a busy box causes)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from appliance.ops.config import PlaybackConfig
from appliance.playback import Player

MAX_DROP_S = 0.04  # what an underrun may lose at a discontinuity (see piecewise_match)


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


@dataclass(frozen=True)
class Match:
    """How a recording holds a reference that was played through a sound server."""

    scores: list[float]  # each loud window's correlation where the pieces put it
    gaps: int  # discontinuities: where the lag changed from one piece to the next
    fidelity: float  # correlation of the recording with the reference laid out in pieces


def piecewise_match(
    recording: npt.NDArray[np.float32],
    reference: npt.NDArray[np.float32],
    rate: int,
    back_s: float = 0.06,
    ahead_s: float = 0.5,
) -> Match:
    """Align each loud 100 ms window of ``reference`` in the recording on its own, then
    check the whole recording against the reference laid out at the lags found.

    An underrun on the way to the sink inserts silence (or loses a little) and shifts all
    that follows, so a single global alignment fails although every piece arrived intact.
    Each window is looked for from ``back_s`` before to ``ahead_s`` after where the
    previous piece puts it.  One that does not match whole there may hold the
    discontinuity: if the reference up to a cut matches at the old lag and, a little
    further on, goes on at a new one, the windows start again from there.  ``fidelity``
    holds the rest to account: what in the recording is not the reference at those lags
    (a corrupted, reordered or lost stretch) lowers it, while inserted silence does not."""
    win, back, ahead = rate // 10, int(back_s * rate), int(ahead_s * rate)
    lag: int | None = None
    pieces: list[tuple[int, int]] = []  # (reference index, lag) where each piece starts
    scores: list[float] = []
    i = 0
    while i + win < len(reference):
        seg = reference[i : i + win]
        if np.sqrt(np.mean(seg**2)) < 0.02:
            i += win
            continue
        if lag is None:  # the first loud window: where its first half is, anywhere
            off, ncc = best_alignment(recording, reference[i : i + win // 2])
            if ncc < 0.9:
                scores.append(ncc)
                i += win
                continue
            lag = off - i
            pieces.append((i, lag))
        lo, hi = max(0, lag + i - back), lag + i + 2 * win + ahead
        off, ncc = best_alignment(recording[lo:hi], seg) if hi - lo >= win else (0, 0.0)
        cut = None
        if ncc < 0.9:
            cut = _discontinuity(recording, reference, i, lag, (lo, hi), rate)
        if cut is not None:
            i += cut  # both sides matched on their own: start again from the far side
            continue
        if ncc >= 0.9 and lo + off - i != lag:
            lag = lo + off - i  # a window that does not match leaves the lag where it was
            pieces.append((i, lag))
        scores.append(ncc)
        i += win
    gaps = len(pieces) - 1 if pieces else 0
    return Match(scores, gaps, _fidelity(recording, reference, pieces))


def _discontinuity(
    recording: npt.NDArray[np.float32],
    reference: npt.NDArray[np.float32],
    i: int,
    lag: int,
    search: tuple[int, int],
    rate: int,
) -> int | None:
    """Where, after ``i``, the reference goes on at a lag of its own: up to a cut it
    matches at ``lag``, and at most ``MAX_DROP_S`` further on it matches within
    ``search`` at another.  Both sides are probed with a whole 100 ms of reference (the
    one ending at the cut, the one starting after it), so a cut near either edge of the
    window is found as surely as one in its middle.  None if there is none."""
    win, step = rate // 10, rate // 400  # cuts every 2.5 ms
    heads = [
        c for c in range(0, win, step) if _matches_at(recording, reference, i + c - win, i + c, lag)
    ]
    if not heads:
        return None
    head = heads[-1]  # the longest: it ends at the discontinuity, give or take a step
    region = recording[search[0] : search[1]]
    tails = range(max(step, head - 2 * step), head + int(MAX_DROP_S * rate) + 1, step)
    found = [(best_alignment(region, reference[i + t : i + t + win]), t) for t in tails]
    (off, ncc), tail = max(found, key=lambda f: f[0][1])
    moved = search[0] + off - (i + tail) != lag  # by as little as a sample
    return tail if ncc >= 0.9 and moved else None


def _matches_at(
    recording: npt.NDArray[np.float32],
    reference: npt.NDArray[np.float32],
    start: int,
    end: int,
    lag: int,
) -> bool:
    """Whether ``reference[start:end]`` is in the recording at ``lag``."""
    start = max(start, 0, -lag)
    probe = reference[start:end].astype(np.float64)
    got = recording[start + lag : end + lag].astype(np.float64)
    norm = float(np.linalg.norm(got) * np.linalg.norm(probe))
    return len(got) == len(probe) and norm > 0 and float(np.dot(got, probe)) / norm >= 0.9


def _fidelity(
    recording: npt.NDArray[np.float32],
    reference: npt.NDArray[np.float32],
    pieces: list[tuple[int, int]],
) -> float:
    """Correlation of the recording with the reference laid out piece by piece at its lags."""
    if not pieces:
        return 0.0
    layout = np.zeros(len(recording), dtype=np.float64)
    # The quiet lead-in before the first loud window goes with the first piece.
    starts = [0, *(start for start, _ in pieces[1:])]
    ends = [*starts[1:], len(reference)]
    for start, end, (_, lag) in zip(starts, ends, pieces, strict=True):
        lo, hi = max(0, start + lag), min(len(recording), end + lag)
        if hi > lo:
            layout[lo:hi] = reference[lo - lag : hi - lag]
    rec = recording.astype(np.float64)
    norm = float(np.linalg.norm(rec) * np.linalg.norm(layout))
    return float(np.dot(rec, layout) / norm) if norm > 0 else 0.0
