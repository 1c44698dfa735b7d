"""Windowed decoding of a clause's latent: the flow and the decoder over frame windows.

A window of frames [a, b) is decoded with ``context`` frames of latent on each
side and trimmed; the flow, when the backend runs it separately, is run just
far enough ahead for the window.  Both are exact (see ``appliance.model.voices`` for
the check against the fused model), so no crossfade is needed inside a clause.
Used by the streamer, by warm-up and by the cut's verification.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

import numpy as np

from appliance.model.engine.base import Encoded, VoiceModel, Window
from appliance.speech import FloatArray

MAX_FLOW_FRAMES = 1024
"""Most frames one later flow call computes (~12 s of audio).  The rest of a clause in one
call made a long clause's run (an 8 000-symbol ``<phoneme>``, 2 000 characters without a
stop) hold buffers the size of the whole clause, and ONNX Runtime's arena kept them; in
windows of this size each call's buffers are bounded, and the overlap costs
2 ``flow_context`` frames per 1 024."""


def ensure_latent(model: VoiceModel, enc: Encoded, upto: int, ahead: bool = True) -> None:
    """Run the flow so that ``z`` is valid on frames [0, ``upto``).

    The first call computes just those frames, which is all the first chunk
    waits for; a later call computes the rest of the clause, at most
    :data:`MAX_FLOW_FRAMES` at once (each call pays ``flow_context`` frames of
    overlap on each side, so few large calls).
    Without ``ahead`` (other work waits for the cores) a later call computes what
    is asked, at least twice the overlap: the rest comes when the cores are free.
    """
    if enc.ready >= upto or enc.z_p is None:
        return
    total = enc.frames
    lo = enc.ready
    c = model.flow_context
    if lo == 0:
        hi = min(total, upto)
    else:
        hi = min(total, max(upto, lo + (MAX_FLOW_FRAMES if ahead else 2 * c)))
        if total - hi < 2 * c:
            hi = total  # a tail this short would cost more in overlap than it holds
    enc.z[:, :, lo:hi] = _flow(model, enc, lo, hi)
    enc.ready = hi
    if hi == total:
        enc.z_p = None


AHEAD_MAX_FRAMES = 128
"""Most frames one decode call produces beyond the chunk asked for (~1.5 s of audio).

The decoder costs the same per frame whatever the window, plus ``context`` frames
on each side: decoding ahead in larger windows than the chunks sent pays that
overhead less often (chunks of 69 frames with 16 frames of context each side
decoded 1.46 frames per frame sent).  The bound keeps one work item short enough
that a newcomer never waits long for a worker (~70 ms on a slow core)."""


SPLIT_MIN_FRAMES = 64
"""The shortest span split in two when another core is free: each half pays its own
``context`` frames (2 x 10 for the bundled voice), worth it from here on."""


class Beside(Protocol):
    """Offer a run to another core; call what comes back for its result
    (:meth:`appliance.core.scheduler.Scheduler.beside`).  ``wait``: offered even while
    every core is busy (a run long enough that one likely comes free before it is
    needed), else only when one is free now."""

    def __call__(
        self, fn: Callable[[], FloatArray], /, *, wait: bool = False
    ) -> Callable[[], FloatArray]: ...


SPLIT_MIN_FLOW_FRAMES = 256
"""The shortest rest of a clause whose flow runs in two halves when another core is free:
each half pays ``flow_context`` frames (32) at the split, ~7 ms of CPU here, and a
later clause of 1 053 frames ran its flow for 113 ms while the other core waited."""


def flow_all(
    model: VoiceModel, enc: Encoded, beside: Beside | None = None, upto: int | None = None
) -> None:
    """Run the flow over every frame not yet run (a later clause encoded ahead, the rest
    of a first clause with its second chunk).

    ``beside`` given (see :func:`decode_span`) and at least :data:`SPLIT_MIN_FLOW_FRAMES`
    to run: the second half is offered to another core and the first run here; as exact
    as any window of the flow (``flow_context`` frames of context each side).  When no
    core may take it, what :func:`ensure_latent` runs for ``upto`` (None: every frame),
    so no split is paid for and its bounds hold."""
    if enc.z_p is None:
        return
    lo, total = enc.ready, enc.frames
    mid = lo + (total - lo) // 2
    second = functools.partial(_flow, model, enc, mid, total)
    later = None
    if beside is not None and total - lo >= SPLIT_MIN_FLOW_FRAMES:
        # Offered even while the other core is busy: a flow this long outlasts most
        # items there (a 1 042-frame flow ran 126 ms beside decode windows of ~40 ms).
        later = beside(second, wait=True)
    if later is None or later is second:  # nobody may take it: no split to pay for
        ensure_latent(model, enc, total if upto is None else upto)
        return
    enc.z[:, :, lo:mid] = _flow(model, enc, lo, mid)
    enc.z[:, :, mid:total] = later()
    enc.ready, enc.z_p = total, None


def _flow(model: VoiceModel, enc: Encoded, lo: int, hi: int) -> FloatArray:
    """``z`` of frames [lo, hi): the flow over them and ``flow_context`` frames each side."""
    assert enc.z_p is not None
    c, total = model.flow_context, enc.frames
    a, b = max(0, lo - c), min(total, hi + c)
    return model.flow(Window(enc.z_p[:, :, a:b], enc.g, (lo - a, b - hi)))


MAX_WINDOW_FRAMES = 256
"""Most frames one decoder run produces (~3 s of audio).  A whole sentence decoded as
one window (``sentence`` mode) made ONNX Runtime's arenas keep that run's buffers for
good; longer spans are decoded window after window (each with its context)."""


def _ahead_end(
    a: int, b: int, total: int, context: int, ahead: bool = True, later: bool = False
) -> int:
    """Where a decode that must produce [a, b) stops: further ahead the further the
    clause has got, so a stream with audio in hand decodes in large windows.

    A clause that has delivered ``a`` frames is at least that far ahead of its
    listener; decoding 4 ``a`` frames takes ~0.2 ``a`` frames' time on one slow core
    (the decoder runs at ~0.045 of real time), so even with a quarter of a core the
    window is done before the audio in hand has played.  A ``later`` clause's first
    chunk counts its own ``b`` frames so: its listener has the clauses before in hand.
    Without ``ahead``, [a, b).
    """
    if a == 0 and not later:
        return b  # a request's first chunk: what the listener waits for
    n = max(b - a, min(AHEAD_MAX_FRAMES, 4 * (a or b))) if ahead else b - a
    end = min(total, a + n)
    if total - end < 2 * context:
        end = total  # a tail this short would cost more in context than it holds
    return end


def decode_span(
    model: VoiceModel,
    enc: Encoded,
    a: int,
    b: int,
    context: int,
    hop: int,
    urgent: bool = False,
    ahead: bool = True,
    beside: Beside | None = None,
    later: bool = False,
) -> FloatArray:
    """Samples of frames [a, b) decoded with ``context`` frames of latent on each side.

    Consecutive calls on one clause (as a stream makes them) may be served from audio
    a previous call decoded ahead (``enc.ahead``); the samples are the same either way.
    ``urgent``: a listener waits for exactly these frames (see :attr:`Window.urgent`).
    ``ahead``: the cores are free for decoding (and running the flow) beyond ``b``;
    when other work waits for them, a call does no more than its own frames need.
    ``beside``: offers a run to another core (its result: the run's samples); given,
    a span of at least :data:`SPLIT_MIN_FRAMES` is decoded in two halves at once.
    ``later``: a later clause of its request, whose first chunk decodes ahead too.
    """
    total = enc.frames
    b = min(b, total)
    have: FloatArray | None = None
    start = a
    if enc.ahead is not None and a > 0:
        cached_end = enc.ahead_from + len(enc.ahead) // hop
        if enc.ahead_from <= a < cached_end:
            start = min(b, cached_end)
            have = enc.ahead[(a - enc.ahead_from) * hop : (start - enc.ahead_from) * hop]
            if start == b:
                enc.ahead = enc.ahead[(b - enc.ahead_from) * hop :]
                enc.ahead_from = b
                return have
    enc.ahead = None
    end = _ahead_end(start, b, total, context, ahead, later)
    upto = min(total, end + context)
    if (
        beside is not None
        and ahead
        and 0 < enc.ready < upto
        and total - enc.ready <= 2 * MAX_FLOW_FRAMES
    ):
        flow_all(model, enc, beside, upto)  # the rest of the clause, half on another core
    else:
        ensure_latent(model, enc, upto, ahead)
    size = MAX_WINDOW_FRAMES
    if beside is not None and end - start >= SPLIT_MIN_FRAMES:
        size = min(size, -(-(end - start) // 2))
    runs = []
    for run_start in range(start, end, size):
        run_end = min(end, run_start + size)
        lo, hi = max(0, run_start - context), min(total, run_end + context)
        margins = (run_start - lo, hi - run_end)
        window = Window(enc.z[:, :, lo:hi], enc.g, margins, urgent=urgent)
        runs.append(functools.partial(model.decode, window))
    rest = [beside(run) for run in runs[1:]] if beside is not None else runs[1:]
    pieces = [runs[0](), *(run() for run in rest)]
    fresh = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    if end > b:
        enc.ahead = fresh[(b - start) * hop :]
        enc.ahead_from = b
    fresh = fresh[: (b - start) * hop]
    return fresh if have is None else np.concatenate([have, fresh])


def decode_windows(
    model: VoiceModel, enc: Encoded, window: int, context: int, hop: int
) -> FloatArray:
    """Whole clause decoded window by window (the reference check of the cut)."""
    parts = [
        decode_span(model, enc, a, min(enc.frames, a + window), context, hop)
        for a in range(0, enc.frames, window)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
