"""Windowed decoding of a clause's latent: the flow and the decoder over frame windows.

A window of frames [a, b) is decoded with ``context`` frames of latent on each
side and trimmed; the flow, when the backend runs it separately, is run just
far enough ahead for the window.  Both are exact (see ``appliance.voices`` for
the check against the fused model), so no crossfade is needed inside a clause.
Used by the streamer, by warm-up and by the cut's verification.
"""

from __future__ import annotations

import numpy as np

from appliance.engine.base import Encoded, FloatArray, VoiceModel


def ensure_latent(model: VoiceModel, enc: Encoded, upto: int) -> None:
    """Run the flow so that ``z`` is valid on frames [0, ``upto``).

    The first call computes just those frames, which is all the first chunk
    waits for; a later call computes the rest of the clause in one go (each call
    pays ``flow_context`` frames of overlap on each side, so few large calls).
    """
    if enc.ready >= upto or enc.z_p is None:
        return
    total = enc.frames
    lo = enc.ready
    hi = total if lo > 0 else min(total, upto)
    c = model.flow_context
    a, b = max(0, lo - c), min(total, hi + c)
    z = model.flow(enc.z_p[:, :, a:b], enc.g)
    enc.z[:, :, lo:hi] = z[:, :, lo - a : hi - a]
    enc.ready = hi
    if hi == total:
        enc.z_p = None


def decode_span(
    model: VoiceModel, enc: Encoded, a: int, b: int, context: int, hop: int
) -> FloatArray:
    """Samples of frames [a, b) decoded with ``context`` frames of latent on each side."""
    total = enc.frames
    lo, hi = max(0, a - context), min(total, b + context)
    ensure_latent(model, enc, hi)
    audio = model.decode(enc.z[:, :, lo:hi], enc.g)
    start = (a - lo) * hop
    return audio[start : start + (b - a) * hop]


def decode_windows(
    model: VoiceModel, enc: Encoded, window: int, context: int, hop: int
) -> FloatArray:
    """Whole clause decoded window by window (the reference check of the cut)."""
    parts = [
        decode_span(model, enc, a, min(enc.frames, a + window), context, hop)
        for a in range(0, enc.frames, window)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
