"""Audio shaping: a chunk's decoded frames → the samples that go out.

Fades where clauses join and around SSML breaks, gain (the request's volume times the
clause's ``<prosody volume>``), the breaks' and pauses' silence, a quick start's
crossfade into its whole sentence, and the time-stretch past the voice's speed.

Thread: the event loop only.  The functions are pure (samples in, samples out); the one
piece of state, :class:`Output`'s libsonic stream (what a time-stretch holds back across
chunks), belongs to one request's job and is touched only by it, a chunk at a time.

Bounds and lifecycle: every function's work and output are linear in its chunk's samples
(the silence in it is what the clause asks, capped by the frontend).  An :class:`Output`
lives as long as its job: made with it, closed with the request's final chunk (or when
the job ends, by the stretcher's own finaliser).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from appliance.model.stretch import MAX_SPEED, VOICE_SPEED_LIMIT, Stretcher
from appliance.speech import FloatArray

if TYPE_CHECKING:
    from appliance.core.pipeline.types import JobSettings, Voiced
    from appliance.model.engine.base import Encoded


def silence_samples(ms: int, rate: int) -> int:
    """Samples of ``ms`` of silence (SSML breaks and pauses are exact to a sample)."""
    return round(ms * rate / 1000)


def fade(audio: FloatArray, n_in: int, n_out: int) -> FloatArray:
    """Linear fade-in over the first ``n_in`` and fade-out over the last ``n_out`` samples."""
    if n_in <= 0 and n_out <= 0:
        return audio
    out = audio.copy()
    if n_in > 0:
        k = min(n_in, len(out))
        out[:k] *= np.linspace(0.0, 1.0, n_in, endpoint=False, dtype=np.float32)[:k]
    if n_out > 0:
        k = min(n_out, len(out))
        out[len(out) - k :] *= np.linspace(1.0, 0.0, n_out, endpoint=False, dtype=np.float32)[
            n_out - k :
        ]
    return out


def crossfade(old: FloatArray, new: FloatArray) -> FloatArray:
    """``old`` fading out while ``new`` fades in (equal lengths: the samples a quick start
    and its whole sentence have just before their join)."""
    n = min(len(old), len(new))
    ramp = np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
    out: FloatArray = old[:n] * (1.0 - ramp) + new[len(new) - n :] * ramp
    return out


def joined(lead: FloatArray, audio: FloatArray, hop: int) -> FloatArray:
    """The first chunk after a join: decoded from one frame before it, whose last samples
    are crossfaded with ``lead`` (the provisional audio's tail); the frame's others go."""
    return np.concatenate([crossfade(lead, audio[hop - len(lead) : hop]), audio[hop:]])


def gain(audio: FloatArray, volume: float) -> FloatArray:
    return audio * np.float32(volume) if volume != 1.0 else audio


@dataclass(frozen=True)
class Shaped:
    """A chunk's speech and the silence around it (SSML breaks, a clause's pauses): kept
    apart because a time-stretch shortens the speech only — a ``<break time="800ms"/>``
    lasts 800 ms at any speed, as SSML says, and marks and word timings count it whole."""

    speech: FloatArray
    before: int = 0
    """Samples of silence before the speech ..."""
    after: int = 0
    """... and after it."""


def shape(
    voiced: Voiced,
    audio: FloatArray,
    frames: tuple[int, int],
    *,
    first: bool,
    join_in: bool,
    fade_out: bool,
    fade_n: int,
    volume: float,
    rate: int,
) -> Shaped:
    """Fades at clause joins (``join_in``: a clause after another; ``fade_out``: one comes
    after it) and around SSML breaks, volume, and the breaks' silence, for the clause's
    ``frames`` [a, b) (``first``: its first chunk)."""
    clause, (a, b) = voiced.clause, frames
    pause_in = a in voiced.pauses and a > 0
    pause_out = b in voiced.pauses
    audio = fade(
        audio, fade_n if join_in or pause_in else 0, fade_n if fade_out or pause_out else 0
    )
    before = after = 0
    if first and voiced.seam == 0:
        before = silence_samples(clause.pause_before_ms + voiced.pauses.get(0, 0), rate)
    if pause_out and b > 0:
        after += silence_samples(voiced.pauses[b], rate)
    if b == voiced.total and clause.pause_after_ms:
        after += silence_samples(clause.pause_after_ms, rate)
    return Shaped(gain(audio, volume * clause.volume), before, after)


def stretch_factor(settings: JobSettings, enc: Encoded | None, clause_speed: float) -> float:
    """A clause's time-stretch, so that its length is ``1 / stretch_speed`` of the voice's
    own at speed 1 (its SSML rate kept).  Re-timed frames come with their length at rate
    1 (``base_frames``): the stretch makes up exactly what the re-timing could not (a
    phoneme keeps at least a frame).  Through the length scale, the voice rounds each
    phoneme up to whole frames, so it is less than ``VOICE_SPEED_LIMIT`` times as fast:
    from its frames at that scale, frames(L) ≈ D·L + n/2 (n phonemes: the ceiling adds
    half a frame each) gives the length at the default scale (as ``encode.rate_scales``
    calibrates SSML rates).  Pure: run on a worker for a quick start, on the loop else."""
    speed = settings.stretch_speed
    assert speed is not None
    plain = speed / VOICE_SPEED_LIMIT
    if enc is None:
        return plain
    base = enc.base_frames
    if base:
        rate = settings.scales.rate * clause_speed
        residual = float(enc.durations.sum()) * rate / base
        return min(MAX_SPEED, max(1.0, plain * residual))
    durations = enc.durations
    frames, n = float(durations.sum()), float(np.count_nonzero(durations))
    scale = settings.scales.length_scale / settings.scales.rate
    per_scale = (frames - n / 2) / scale
    full = per_scale * scale * VOICE_SPEED_LIMIT + n / 2
    if per_scale <= 0 or frames <= 0:
        return plain
    return min(MAX_SPEED, max(1.0, speed * frames / full))


class Output:
    """The last shaping stage: a :class:`Shaped` → the chunk's samples, its speech
    time-stretched when the request is past the voice's speed (``speed``; None: not).

    libsonic holds back ~20 ms of speech across chunks (:attr:`held_s`: the timeline
    counts it) and is flushed before a silence, so the speech it holds comes out before
    the silence, not after."""

    def __init__(self, rate: int, speed: float | None) -> None:
        self._rate = rate
        self._stretch = Stretcher(rate, speed / VOICE_SPEED_LIMIT) if speed is not None else None

    @property
    def stretching(self) -> bool:
        """A stretch is open (past the voice's speed, and the final chunk not out yet)."""
        return self._stretch is not None

    @property
    def factor(self) -> float:
        """The stretch the next speech gets (1.0: none)."""
        return self._stretch.factor if self._stretch is not None else 1.0

    @property
    def held_s(self) -> float:
        """Seconds of output the stretch owes for the speech so far."""
        held = self._stretch.held if self._stretch is not None else 0.0
        return held / self._rate

    def set_factor(self, factor: float) -> None:
        """The next speech's stretch (a clause's own; nothing without a stretch)."""
        if self._stretch is not None:
            self._stretch.set_factor(factor)

    def render(self, shaped: Shaped, final: bool) -> FloatArray:
        """A chunk's samples (``final``: the request's last; the stretch is closed)."""
        parts: list[FloatArray] = []
        stretch = self._stretch
        if shaped.before:
            if stretch is not None:
                parts.append(stretch.flush())
            parts.append(np.zeros(shaped.before, np.float32))
        parts.append(stretch.process(shaped.speech) if stretch is not None else shaped.speech)
        if stretch is not None and (shaped.after or final):
            parts.append(stretch.flush())
        if shaped.after:
            parts.append(np.zeros(shaped.after, np.float32))
        if stretch is not None and final:
            stretch.close()
            self._stretch = None
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
