"""Speech ``rate`` times as fast, exactly as long as asked: the prior re-timed before the flow.

A VITS voice gives phoneme id ``i`` ``ceil(u_i)`` frames, ``u_i`` its predicted length at
the call's ``length_scale``.  Dividing the length scale by a speed is what piper-tts
offers, but the ceiling rounds every id *up*, so short ids barely shrink: ``length_scale``
0.5 gave 0.62 of the audio, not half (and 2.0 less than double).  Here the prior runs at
the voice's own scale (the very frames piper-tts gives at speed 1) and also hands out
``u`` (the input of its ``Ceil``); :func:`retime` finds the factor ``s`` for which
``ceil(u · s)`` sums to the speed-1 length divided by ``rate`` (rounded: exact to a frame)
and returns those durations — what the graph itself gives at length scale ``s`` times its
own, only with ``s`` chosen for the length that comes out rather than the one that goes in.
So the voice's own proportions between phonemes stay (no id vanishes; short ones keep
their frame, long ones shrink most, as with the length scale), and only the total is set.

One factor for the whole clause rounds each id on its own, so a word's start drifts from
``1 / rate`` of its place by the roundings before it (up to 4.5 frames at speed 1.5, 3.5 at
2, measured on four sentences).  With ``anchors`` (the ids that start a word), each anchor's
start frame is also set where the rate puts it (rounded: half a frame), by giving or taking
the frames a word is off to its ids that the ceiling rounded least (or most): the id
closest to a frame more (or less) at the clause's factor.  Within a word the proportions
are the voice's, give or take those frames.

The prior's latent is each id's mean (and scale) repeated over its frames (``z_p = m +
ε · std``; the alignment is a hard path): :func:`respace` lays each id's column over its
new frames, and fresh noise is drawn over the new length, so the flow and the decoder get
what the voice would have produced at that length scale.

Pure functions, linear in ids and frames (the search runs :data:`SEARCH_STEPS` sums over
the ids; anchoring, one pass over the words and a step per frame a word is off); nothing
kept between calls.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from appliance.speech import FloatArray

__all__ = ["SEARCH_STEPS", "respace", "retime"]

SEARCH_STEPS = 40
"""Bisection steps for the factor (its bracket shrinks to 2^-40 of itself: far finer than
any two ids' frame boundaries are apart)."""


def _frames(unrounded: np.ndarray[Any, np.dtype[np.float64]], s: float) -> int:
    return int(np.ceil(unrounded * s).sum())


def retime(
    durations: FloatArray, unrounded: FloatArray, rate: float, anchors: Sequence[int] = ()
) -> FloatArray:
    """Frames per id for speech ``rate`` times as fast as ``durations`` (= ceil of
    ``unrounded``, the prior's own), in the proportions of ``unrounded``; each of
    ``anchors`` (id positions, ascending) starting where the rate puts it, to half a frame."""
    u = np.asarray(unrounded, dtype=np.float64).reshape(-1)
    target = math.floor(float(np.sum(durations)) / rate + 0.5)
    target = max(target, int(np.count_nonzero(u > 0)))  # every id keeps a frame
    lo, hi = 0.0, 1.0 / rate
    while _frames(u, hi) < target:  # the ceiling adds frames: the bracket may be short
        lo, hi = hi, 2.0 * hi
    for _ in range(SEARCH_STEPS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _frames(u, mid) < target else (lo, mid)
    # hi gives at least the target; lo fewer.  Take whichever is nearer (hi on a tie).
    s = lo if target - _frames(u, lo) < _frames(u, hi) - target else hi
    new = np.ceil(u * s)
    if len(anchors):
        _anchor(new, u * s, np.asarray(durations, dtype=np.float64).reshape(-1), rate, anchors)
    return new.astype(np.float32)


def _anchor(
    new: np.ndarray[Any, np.dtype[np.float64]],
    scaled: np.ndarray[Any, np.dtype[np.float64]],
    durations: np.ndarray[Any, np.dtype[np.float64]],
    rate: float,
    anchors: Sequence[int],
) -> None:
    """Move frames between the words of ``new`` (in place) so that each anchor starts at
    its place at speed 1 divided by ``rate``, rounded, and the total stays.  A word short
    of frames gets them on the ids ``scaled`` (the unrounded frames at the found factor)
    was nearest giving one more; a word with too many loses them from the ids the ceiling
    rounded up most, never below a frame.  What a word cannot give is left to the next
    (the last word's leftover stays: the total is then that much off, as without anchors
    when every id is down to its frame)."""
    n = len(new)
    bounds = np.array([0, *(p for p in anchors if 0 < p < n), n], dtype=np.int64)
    bounds = bounds[np.flatnonzero(np.diff(bounds, prepend=-1) > 0)]  # ascending, once each
    cum1 = np.concatenate(([0.0], np.cumsum(durations)))
    want = np.floor(cum1[bounds] / rate + 0.5)
    want[-1] = new.sum()  # the total the search found (exact, or as near as the ceiling allows)
    least = np.add.reduceat((new > 0).astype(np.float64), bounds[:-1])
    have = np.add.reduceat(new, bounds[:-1])
    off = np.diff(_places(want.tolist(), least.tolist())) - have  # short (< 0: too many)
    carry = 0.0
    for k, short in enumerate(off.tolist()):
        if short or carry:
            a, b = int(bounds[k]), int(bounds[k + 1])
            carry = _move(new[a:b], scaled[a:b], short + carry)


def _places(want: list[float], least: list[float]) -> list[float]:
    """Each anchor's start frame: ``want`` where the words allow it, each word keeping
    ``least`` frames (one per id that has any).  A word that cannot shrink enough (ids
    already down to a frame) pushes the words after it late; the largest miss is halved
    by starting the words before it that much early — the least largest miss there is,
    within a frame — and every anchor is as near its wanted frame as that allows."""
    before = list(itertools.accumulate(least, initial=0.0))
    ahead = [w - b for w, b in zip(want, before, strict=True)]
    worst = max(top - a for top, a in zip(itertools.accumulate(ahead, max), ahead, strict=True))
    slack = math.ceil(worst / 2)
    last = len(want) - 1
    up = [*want]  # the latest each may start, for every later one to be within slack
    for k in range(last - 1, -1, -1):
        up[k] = min(want[k] + slack, up[k + 1] - least[k])
    at = [0.0] * len(want)
    for k in range(1, last + 1):
        at[k] = min(up[k], max(want[k], at[k - 1] + least[k - 1]))
    return at


def _move(
    d: np.ndarray[Any, np.dtype[np.float64]],
    scaled: np.ndarray[Any, np.dtype[np.float64]],
    frames: float,
) -> float:
    """Give ``frames`` (take, if negative) to one word's ids ``d`` in place, a frame at a
    time to the id nearest deserving it; returns what could not be taken."""
    step = 1.0 if frames > 0 else -1.0
    left = abs(frames)
    while left >= 0.5:
        # Rounded up by d - scaled: give to the least rounded-up, take from the most.
        if step > 0:
            excess = np.where(scaled > 0, d - scaled, np.inf)
        else:
            excess = np.where(d > 1, scaled - d, np.inf)
        i = int(np.argmin(excess))
        if not np.isfinite(excess[i]):  # no id can give (or take) a frame
            break
        d[i] += step
        left -= 1.0
    return step * left


def respace(x: FloatArray, durations: FloatArray, new: FloatArray) -> FloatArray:
    """``x`` [1, C, frames], each id's frames the same column (the prior's mean or scale),
    laid out again over ``new`` frames per id."""
    d = np.asarray(durations, dtype=np.int64)
    n = np.asarray(new, dtype=np.int64)
    starts = np.cumsum(d) - d
    had = d > 0
    if np.any(n[~had] > 0):
        raise ValueError("an id without frames cannot be given some")
    columns = x[:, :, starts[had]]
    return np.ascontiguousarray(np.repeat(columns, n[had], axis=2), dtype=np.float32)
