"""Helpers for the playback tests: waiting for the stream, test tones, spectra."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from appliance.config import PlaybackConfig
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
    """Lag of ``reference`` inside ``recording`` and the normalised correlation there."""
    n = len(recording) + len(reference)
    size = 1 << (n - 1).bit_length()
    spec = np.fft.rfft(recording, size) * np.conj(np.fft.rfft(reference, size))
    corr = np.fft.irfft(spec, size)[: len(recording) - len(reference) + 1]
    lag = int(np.argmax(corr))
    seg = recording[lag : lag + len(reference)]
    denom = float(np.linalg.norm(seg) * np.linalg.norm(reference))
    return lag, float(np.dot(seg, reference) / denom) if denom else 0.0


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
