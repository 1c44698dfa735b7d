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

The prior's latent is each id's mean (and scale) repeated over its frames (``z_p = m +
ε · std``; the alignment is a hard path): :func:`respace` lays each id's column over its
new frames, and fresh noise is drawn over the new length, so the flow and the decoder get
what the voice would have produced at that length scale.

Pure functions, linear in ids and frames (the search runs :data:`SEARCH_STEPS` sums over
the ids); nothing kept between calls.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from appliance.speech import FloatArray

__all__ = ["SEARCH_STEPS", "respace", "retime"]

SEARCH_STEPS = 40
"""Bisection steps for the factor (its bracket shrinks to 2^-40 of itself: far finer than
any two ids' frame boundaries are apart)."""


def _frames(unrounded: np.ndarray[Any, np.dtype[np.float64]], s: float) -> int:
    return int(np.ceil(unrounded * s).sum())


def retime(durations: FloatArray, unrounded: FloatArray, rate: float) -> FloatArray:
    """Frames per id for speech ``rate`` times as fast as ``durations`` (= ceil of
    ``unrounded``, the prior's own), in the proportions of ``unrounded``."""
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
    return np.ceil(u * s).astype(np.float32)


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
