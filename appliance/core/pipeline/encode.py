"""The pipeline's worker stage: phonemes, encodings, chunk plans, first chunks, words.

Every function here runs on an inference worker (the scheduler's threads), as the body
of one work item: it takes immutable inputs — an :class:`EncodeContext` (the voice, the
job's settings, its chunk plan) and a clause or an encoding — and returns its result;
it keeps nothing and touches no loop state (a first decode's time goes back in its
result for the loop to learn from: ``VoiceCosts``).  The one question asked of the world
is :attr:`EncodeContext.crowded`, the scheduler's own, asked from the worker it runs on.
The chunk plan and a clause's pause frames are pure too, and also run on the loop (for
a later clause, whose plan waits for the chunk before it).

Per clause: phonemize → encode (the prior only for a first clause: the flow runs
window by window) → with word timings, find the written words' ids.  A request's first
clause also plans its chunks and decodes its first one in the same item (a second item
would queue behind other streams' work while the listener waits), or takes its start
strategy's first audio (:mod:`appliance.core.pipeline.start`).  Later chunks are
decoded by :func:`decode`, one item each.

Bounds: no encoder call takes more than ``max_phonemes`` ids
(:mod:`appliance.model.engine.bounded`); a decode runs one chunk's frames and their
context (decoding ahead only while the workers are not crowded); word work is linear in
the clause (:mod:`appliance.core.wordtimes`).  Nothing outlives the item but its result.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from appliance.core import wordtimes
from appliance.core.chunkplan import ModePlan, pause_frames, plan_chunks
from appliance.core.pipeline.types import (
    EncodedClause,
    JobSettings,
    Provisional,
    Voiced,
    VoiceRuntime,
)
from appliance.model.engine.base import Encoded, Scales
from appliance.model.engine.bounded import Pieces
from appliance.model.engine.windows import Beside, decode_span, flow_all
from appliance.speech import FloatArray, IntArray

if TYPE_CHECKING:
    from appliance.text.frontend import Clause


@dataclass(frozen=True)
class EncodeContext:
    """What the worker stage reads: one job's voice and settings, fixed for its life."""

    voice: VoiceRuntime
    settings: JobSettings
    plan: ModePlan
    frame_ms: float
    """A frame of the voice's own audio, in ms."""
    fade: int
    """Samples of a join's fade (a provisional start's crossfade)."""
    crowded: Callable[[], bool]
    """``Scheduler.crowded``: another worker runs due work, or due work waits (asked on the
    worker, of the scheduler, under its lock)."""
    beside: Beside | None = None
    """``Scheduler.beside``: a part of the item offered to an idle worker (None: the item
    runs all of itself)."""


class Opener(Protocol):
    """A start strategy's worker half (:class:`appliance.core.pipeline.start.StartStrategy`)."""

    def open(self, ctx: EncodeContext, clause: Clause, ids: IntArray) -> Provisional | None: ...


def clause_ids(ctx: EncodeContext, clause: Clause) -> IntArray:
    ph = ctx.voice.phonemizer
    if clause.phonemes:  # SSML <phoneme>, lexicon IPA entries
        return ph.ids_for(ph.phonemes_with(clause.text, clause.phonemes))
    return ph.ids(clause.text)


def anchored(ctx: EncodeContext, ids: IntArray, scales: Scales) -> Scales:
    """Re-timed, every word starts where the rate puts it (to half a frame: word timings
    scale with the speed), not wherever the roundings before it land it."""
    if scales.rate == 1.0 or not ctx.voice.model.retimes:
        return scales
    starts = wordtimes.spoken_words(ids, ctx.voice.phonemizer.kinds)
    return dataclasses.replace(scales, anchors=tuple(a for a, _ in starts))


def bounded(
    ctx: EncodeContext, ids: IntArray, scales: Scales, prior: bool
) -> tuple[IntArray, Encoded]:
    scales = anchored(ctx, ids, scales)
    return pieces(ctx).encode(ctx.voice.model, ids, scales, ctx.settings.speaker, prior)


def pieces(ctx: EncodeContext) -> Pieces:
    """How this request's ids beyond ``engine.max_phonemes`` are cut."""
    return Pieces(ctx.settings.max_phonemes, ctx.voice.phonemizer.is_boundary)


def rate_scales(ctx: EncodeContext, ids: IntArray, speed: float) -> Scales:
    """Scales that make a clause ``speed`` times as fast (SSML ``<prosody rate>``).

    A backend that re-times the prior (:attr:`VoiceModel.retimes`) does it exactly.
    Otherwise dividing ``length_scale`` by the factor is not enough: the voice rounds
    every phoneme's duration *up* to whole frames, so short phonemes barely stretch
    (rate x-slow gave 1.72× the length, not 2×).  One durations-only pass at the
    request's scale calibrates it: frames(L) ≈ D·L + n/2 for n phonemes (the ceiling
    adds half a frame each on average), solved for the target length.  Whole-clause
    voices get the plain division.
    """
    s = ctx.settings.scales
    if ctx.voice.model.retimes:
        return dataclasses.replace(s, rate=s.rate * speed)
    s = dataclasses.replace(s, length_scale=s.length_scale / s.rate, rate=1.0)
    naive = dataclasses.replace(s, length_scale=s.length_scale / speed)
    if not ctx.voice.can_stream:
        return naive
    base = bounded(ctx, ids, s, prior=True)[1].durations
    n = float(np.count_nonzero(base))
    frames = float(base.sum())
    per_scale = (frames - n / 2) / s.length_scale
    if per_scale <= 0:
        return naive
    scale = (frames / speed - n / 2) / per_scale
    return dataclasses.replace(s, length_scale=max(0.1 * naive.length_scale, scale))


def urgent_decode(ctx: EncodeContext) -> bool:
    """A first chunk of a streaming plan is what a real-time listener waits for: the
    backend's fastest decoder, if the cores it spreads over are free.  In a burst, and
    for a whole-sentence chunk (mode sentence, what Piper does) or a batch request, the
    cheapest (appliance.model.conv2d): 16 vs 21 ms of CPU."""
    s = ctx.settings
    return s.realtime and not s.deterministic and not ctx.plan.whole and not ctx.crowded()


def plan_clause(
    ctx: EncodeContext,
    clause: Clause,
    ids: IntArray,
    enc: Encoded,
    target: int,
    first: bool,
    start: int = 0,
) -> tuple[list[tuple[int, int]], int]:
    """The clause's chunks from frame ``start`` and the next chunk's size (pure)."""
    ph = ctx.voice.phonemizer
    boundary = [ph.is_boundary(int(i)) for i in ids]
    forced = [round(f) for f in pause_frames(clause, ids, enc.durations, ph.is_space)]
    return plan_chunks(enc.durations, boundary, ctx.plan, target, first, start, forced)


def voice_clause(
    ctx: EncodeContext,
    clause: Clause,
    encoded: EncodedClause,
    target: int,
    first: bool,
    speech_ms: float,
    start: int = 0,
) -> tuple[Voiced, int]:
    """How the clause's frames from ``start`` become output, its frame 0 sounding at
    ``speech_ms``: its chunks (a first clause's came planned with its encoding) and its
    SSML pauses; and the next chunk's size (pure)."""
    if encoded.enc is not None:
        if encoded.chunks is not None:
            chunks, target = encoded.chunks, encoded.target
        else:
            chunks, target = plan_clause(
                ctx, clause, encoded.ids, encoded.enc, target, first, start
            )
        total = encoded.enc.frames
        durations = encoded.enc.durations
    else:
        assert encoded.audio is not None
        total = len(encoded.audio) // ctx.voice.hop
        chunks = [(0, total)] if len(encoded.audio) else []
        durations = None
    is_space = ctx.voice.phonemizer.is_space
    pauses: dict[int, int] = {}
    for f, p in zip(
        pause_frames(clause, encoded.ids, durations, is_space), clause.pauses, strict=True
    ):
        key = min(total, round(f))
        pauses[key] = pauses.get(key, 0) + p.ms
    return Voiced(clause, encoded, chunks, total, speech_ms, pauses), target


# ------------------------------------------------------------------ work items


def encode_clause(ctx: EncodeContext, clause: Clause) -> EncodedClause:
    """A later clause's item: phonemize and encode it whole (prior and flow); with word
    timings, find all its written words.  While no other work waits, a long clause's flow
    runs in two halves, one on a free core (one piece only: the pieces of a clause past
    ``engine.max_phonemes`` each run their own flow)."""
    ids = clause_ids(ctx, clause)
    scales = _scales(ctx, clause, ids)
    if not ctx.voice.can_stream:
        out = _fused(ctx, ids, scales)
    elif ctx.beside is not None and len(ids) <= ctx.settings.max_phonemes and _splits(ctx):
        ids, enc = bounded(ctx, ids, scales, prior=True)
        flow_all(ctx.voice.model, enc, ctx.beside)
        out = EncodedClause(ids, enc, None)
    else:
        out = EncodedClause(*bounded(ctx, ids, scales, prior=False), None)
    return _with_words(ctx, clause, out, first=False)


def encode_first(
    ctx: EncodeContext, clause: Clause, target: int, start: Opener | None
) -> EncodedClause:
    """A request's first clause: its start strategy's first audio if it gives one (then
    the whole sentence is encoded while it plays), else the prior, the chunk plan and
    the first chunk (the flow runs over that chunk's frames only; the rest of it comes
    with the second chunk); with word timings, the words its first chunk needs."""
    ids = clause_ids(ctx, clause)
    scales = _scales(ctx, clause, ids)
    if not ctx.voice.can_stream:
        out = _fused(ctx, ids, scales)
    elif start is not None and (opening := start.open(ctx, clause, ids)) is not None:
        out = EncodedClause(ids, None, None, opening=opening, first_decode_s=opening.decode_s)
    else:
        out = _first_chunk(ctx, clause, ids, scales, target)
    return _with_words(ctx, clause, out, first=True)


def decode(
    ctx: EncodeContext, enc: Encoded, a: int, b: int, words: wordtimes.WordWork | None
) -> tuple[FloatArray, list[wordtimes.WrittenWord] | None]:
    """A later chunk's frames [a, b) and, when given, all of a clause's written words (the
    ones its first chunk went out without).  Decoded ahead only while no other work
    waits: in a burst of newcomers, a second chunk that ran the rest of its clause's flow
    and decoded 4× its frames took ~50 ms, and the last streams' second chunks came after
    their listeners had run dry."""
    s, v = ctx.settings, ctx.voice
    ahead = _ahead(ctx)
    beside = ctx.beside if ahead else None
    audio = decode_span(
        v.model, enc, a, b, s.context, v.hop, ahead=ahead, beside=beside, later=True
    )
    return audio, words.all() if words is not None else None


def _ahead(ctx: EncodeContext) -> bool:
    """Whether the item may work ahead and hand parts to a free core: no other work waits
    for the cores (and not in ``deterministic`` mode, whose work never follows the load)."""
    return not ctx.settings.deterministic and not ctx.crowded()


def _splits(ctx: EncodeContext) -> bool:
    """Whether a later clause's flow may offer half of itself (the scheduler gives it to
    another core only while the request has all the work there is, its own due work
    included): not in ``deterministic`` mode."""
    return not ctx.settings.deterministic


def whole_prior(ctx: EncodeContext, ids: IntArray) -> tuple[Encoded, float]:
    """The whole sentence's prior, after a provisional start, and its seconds (which
    teach the voice's cost estimate, on the loop)."""
    t0 = time.monotonic()
    _, enc = bounded(ctx, ids, ctx.settings.scales, prior=True)
    return enc, time.monotonic() - t0


def _scales(ctx: EncodeContext, clause: Clause, ids: IntArray) -> Scales:
    return rate_scales(ctx, ids, clause.speed) if clause.speed != 1.0 else ctx.settings.scales


def _fused(ctx: EncodeContext, ids: IntArray, scales: Scales) -> EncodedClause:
    audio = pieces(ctx).fused(ctx.voice.model, ids, scales, ctx.settings.speaker)
    return EncodedClause(ids, None, audio)


def _first_chunk(
    ctx: EncodeContext, clause: Clause, ids: IntArray, scales: Scales, target: int
) -> EncodedClause:
    v, s = ctx.voice, ctx.settings
    t0 = time.monotonic()
    ids, enc = bounded(ctx, ids, scales, prior=True)
    prior_s = time.monotonic() - t0
    chunks, target = plan_clause(ctx, clause, ids, enc, target, first=True)
    if not chunks:
        return EncodedClause(ids, enc, None, chunks, target, prior_s=prior_s)
    t0 = time.monotonic()
    a, b = chunks[0]
    audio = decode_span(v.model, enc, a, b, s.context, v.hop, urgent_decode(ctx))
    decode_s = time.monotonic() - t0
    return EncodedClause(ids, enc, None, chunks, target, audio, decode_s, prior_s=prior_s)


# ------------------------------------------------------------------ words found


def word_work(ctx: EncodeContext, clause: Clause, ids: IntArray) -> wordtimes.WordWork:
    ph = ctx.voice.phonemizer
    return wordtimes.WordWork.of(clause.text, clause.word_spans, ids, ph.kinds, ph.word_size)


def _with_words(
    ctx: EncodeContext, clause: Clause, out: EncodedClause, first: bool
) -> EncodedClause:
    """With word timings, the clause's written words; a request's first clause finds those
    its first chunk needs now, the rest with its next chunk (:class:`wordtimes.WordWork`)."""
    if not ctx.settings.word_timings:
        return out
    t0 = time.perf_counter()
    work = word_work(ctx, clause, out.ids)
    position = first_chunk_ids(out) if first else None
    if position is None:
        written, left = work.all(), None
    else:
        written = work.before(position)
        left = work if work.pending else None
    words_s = time.perf_counter() - t0
    return dataclasses.replace(out, written=written, words_left=left, words_s=words_s)


def first_chunk_ids(out: EncodedClause) -> int | None:
    """An id position every word the first chunk may carry starts before (None: no
    first chunk of its own, it needs them all)."""
    if out.opening is not None:  # words that start after the join are the next encoding's
        return out.opening.seam
    if out.enc is None or not out.chunks:
        return None
    # A word goes with the chunk its first frame is in (to half a frame): one frame
    # past the chunk's end leaves no doubt.  (The durations a Python float at a time,
    # as far as the chunk: see wordtimes.FrameSums.)
    limit, n = out.chunks[0][1] + 1, len(out.enc.durations)
    for p, frames in enumerate(itertools.accumulate(out.enc.durations.data, initial=0.0)):
        if frames >= limit:
            return p if p < n else None
    return None
