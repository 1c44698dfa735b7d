"""How a request's first sentence starts: the start strategies.

A strategy has two halves, one per thread.  :meth:`StartStrategy.open` runs on the
worker, inside the first clause's encode item (:func:`.encode.encode_first`): pure, it
takes the immutable context, the clause and its ids, and returns a :class:`Provisional`
(first audio from a provisional encoding, up to a join) or None (then the sentence is
encoded whole and starts plainly).  :meth:`StartStrategy.play` runs on the loop: it sends
the provisional audio through the job (:class:`StartHost`), has the next encoding made,
and hands back the rest of the sentence planned from the join (:func:`take_over`).

:class:`QuickStart` (today's only strategy): the whole sentence's prior costs ~0.1 ms
per phoneme id here (31 ms for 150 characters), its first words' ~8 ms.  The first
chunk comes from those, the whole sentence is encoded while it plays, and the two join
at a word gap inside the first :data:`~appliance.core.chunkplan.QUICK_MAX_MS`; from the
join on, the audio is the whole sentence's own.

The seam is made for an *eager* start (text that streams in, issue 44): its ``open``
would encode the known prefix of a sentence still arriving; its ``play`` would send that
audio up to the word gap before the last known word, and as longer prefixes arrive
submit their encodings (``host.submit``) and let each take over at a word gap ahead of
the playhead — :func:`take_over` with the longer prefix's encoding, :class:`JoinWords`
for the words either side, the crossfade in :func:`.shape.joined` — the whole sentence's
encoding last.

Bounds and lifecycle: a strategy keeps no state (one instance serves every job); a
provisional encoding is at most :data:`~appliance.core.chunkplan.QUICK_PREFIX_IDS` ids
and a word, and its audio is one chunk; everything it makes belongs to the one clause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from appliance.core import wordtimes
from appliance.core.chunkplan import (
    QUICK_MAX_MS,
    QUICK_MIN_IDS,
    IdTest,
    SeamWindow,
    choose_seam,
    chunk_span,
    position_frames,
    quick_prefix,
)
from appliance.core.pipeline.encode import (
    EncodeContext,
    Opener,
    anchored,
    urgent_decode,
    whole_prior,
)
from appliance.core.pipeline.shape import Output, Shaped, gain, silence_samples, stretch_factor
from appliance.core.pipeline.types import (
    Emit,
    EncodedClause,
    JobStats,
    PendingWords,
    Place,
    Provisional,
    Voiced,
)
from appliance.model.engine.base import Encoded
from appliance.model.engine.windows import decode_span
from appliance.model.stretch import split_speed
from appliance.speech import IntArray, Mark

if TYPE_CHECKING:
    from appliance.core.pipeline.timeline import Timeline
    from appliance.core.scheduler import WorkTiming
    from appliance.text.frontend import Clause

log = logging.getLogger(__name__)


class StartHost(Protocol):
    """What a strategy's loop half uses of the job (``streaming.SynthesisJob``)."""

    ctx: EncodeContext
    stats: JobStats
    timeline: Timeline
    output: Output

    def submit(
        self, fn: Callable[[], Any], kind: str, later_s: float = 0.0
    ) -> asyncio.Future[tuple[Any, WorkTiming]]:
        """Run ``fn`` on a worker, due when the listener runs dry (the listener is waiting),
        or ``later_s`` after that (audio that plays before its result is already made)."""
        ...

    async def send(self, shaped: Shaped, place: Place, emit: Emit) -> None:
        """Render and send one chunk."""
        ...

    def plan(self, clause: Clause, encoded: EncodedClause, start: int = 0) -> Voiced:
        """The clause's chunks from frame ``start`` (the chunk sizes grow on from there)."""
        ...

    def grow(self, frames: int) -> None:
        """A chunk of ``frames`` went out: the next may be about twice as long."""
        ...


class StartStrategy(Opener, Protocol):
    """How a request's first sentence starts (see the module): :meth:`open` on the worker,
    :meth:`play` on the loop when ``open`` gave a :class:`Provisional`."""

    async def play(
        self, host: StartHost, clause: Clause, encoded: EncodedClause, emit: Emit
    ) -> Voiced:
        """Send the provisional audio (``encoded.opening``), have the next encoding made,
        and return the rest of the clause planned from the join."""
        ...


def choose(ctx: EncodeContext) -> StartStrategy | None:
    """The job's start strategy: a quick start where one can pay (a real-time stream, the
    config allows it, the audio need not be the same every time); None: a plain start."""
    s = ctx.settings
    if s.quick_start and not s.deterministic and s.realtime and not ctx.plan.whole:
        return QuickStart()
    return None


@dataclass(frozen=True)
class JoinWords:
    """How a join ``seam`` ids into a clause splits its words: a word with some of its
    sound before the join (more than the pad before its first sounding id) goes with the
    provisional audio, timed by its encoding; the rest are the next encoding's."""

    seam: int

    def before(self, w: wordtimes.WrittenWord) -> bool:
        return w.start < self.seam - 1 or w.end <= self.seam

    def after(self, w: wordtimes.WrittenWord) -> bool:
        return not self.before(w)

    def after_time(self, at: wordtimes.IdTime, heard_end_ms: float) -> wordtimes.IdTime:
        """The next encoding's times (``at``) for the words after the join: the first of
        them starts at the join at the earliest (its pad before it is the provisional
        audio's), and not before ``heard_end_ms``, the end of a word the join cut (at a
        stop), timed by the provisional frames, a frame or so off the next's."""
        seam = self.seam

        def after_join(p: int, start: bool) -> float:
            t = at(max(p, seam), start)
            return max(t, heard_end_ms) if start else t

        return after_join


@dataclass(frozen=True)
class Heard:
    """What went out before a join: how many of the clause's marks, and where the last
    word placed with it ends (ms; 0.0: none)."""

    marks: int
    words_end_ms: float


class QuickStart:
    """A long first sentence starts from a quick encoding of its first words (see the
    module); the whole sentence's encoding takes over at a word gap within
    :data:`~appliance.core.chunkplan.QUICK_MAX_MS`."""

    def open(self, ctx: EncodeContext, clause: Clause, ids: IntArray) -> Provisional | None:
        """On the worker: the first chunk from a quick encoding, or None where it would not
        pay (a short or paused or re-paced sentence, busy cores) or no join fits."""
        s = ctx.settings
        allowed = (
            clause.speed == 1.0
            and not clause.pauses
            and QUICK_MIN_IDS <= len(ids) <= s.max_phonemes
            and not ctx.crowded()
        )
        return quick_opening(ctx, ids) if allowed else None

    async def play(
        self, host: StartHost, clause: Clause, encoded: EncodedClause, emit: Emit
    ) -> Voiced:
        """Send the quick chunk, encode the whole sentence meanwhile, and return the rest
        of the clause planned from the join."""
        take = encoded.opening
        assert take is not None
        # Submitted before the first chunk goes out (emit may wait for a slow reader).
        whole = host.submit(functools.partial(whole_prior, host.ctx, encoded.ids), "encode")
        host.stats.quick_start = True
        join = JoinWords(take.seam)
        heard = await play_provisional(host, clause, encoded, take, join, emit)
        (enc, prior_s), _ = await whole
        host.ctx.voice.costs.observe_prior(len(encoded.ids), prior_s)
        return take_over(host, clause, encoded, take, enc, join, heard)


async def play_provisional(
    host: StartHost,
    clause: Clause,
    encoded: EncodedClause,
    take: Provisional,
    join: JoinWords,
    emit: Emit,
) -> Heard:
    """Send a provisional take's audio up to its join, with the clause's marks and words
    that sound before it (timed by the take's own encoding)."""
    tl, ctx = host.timeline, host.ctx
    host.output.set_factor(take.stretch)  # before the first marks and words are timed
    start_ms = tl.next_ms() + clause.pause_before_ms
    frame_ms = tl.out_frame_ms()
    marks = provisional_marks(clause, take, start_ms, frame_ms, ctx.voice.phonemizer.is_space)
    tl.place_marks(marks)
    words_end = 0.0
    if tl.words or tl.visemes:
        at = provisional_time(take, start_ms, frame_ms)
        tl.place_visemes(encoded.ids, at, join.before)
        words_end = tl.place_words(encoded.written, at, join.before)
    before = silence_samples(clause.pause_before_ms, ctx.voice.sample_rate)
    span = chunk_span(clause, 0, take.seam, len(encoded.ids))
    audio = gain(take.audio, ctx.settings.volume * clause.volume)
    await host.send(Shaped(audio, before), Place(span), emit)
    host.stats.windows += 1
    host.grow(take.frames)
    return Heard(len(marks), words_end)


def take_over(
    host: StartHost,
    clause: Clause,
    encoded: EncodedClause,
    take: Provisional,
    enc: Encoded,
    join: JoinWords,
    heard: Heard,
) -> Voiced:
    """The rest of the clause from ``enc`` (the next encoding of the same ids), planned
    from the join; its marks and words after the join placed (or pending)."""
    tl, ctx = host.timeline, host.ctx
    rest = EncodedClause(encoded.ids, enc, None)
    if host.output.stretching:  # the next encoding's, before the rest is timed
        host.output.set_factor(stretch_factor(ctx.settings, enc, clause.speed))
    seam = int(np.cumsum(enc.durations)[take.seam - 1])
    planned = host.plan(clause, rest, start=seam)
    # The join sounds after the provisional audio sent (stretched at its own factor) and
    # its tail, which is crossfaded into the next's first chunk (at the next's factor).
    fm = tl.out_frame_ms()
    tail_ms = len(take.tail) / ctx.voice.sample_rate * 1000 * fm / ctx.frame_ms
    speech_ms = tl.next_ms() + tail_ms - seam * fm
    voiced = dataclasses.replace(planned, speech_ms=speech_ms, seam=seam, lead=take.tail)
    tl.place_clause_marks(voiced, skip=heard.marks)
    if tl.visemes:
        tl.place_visemes(encoded.ids, join.after_time(tl.id_time(voiced), 0.0), join.after)
    if tl.words:
        at = join.after_time(tl.id_time(voiced), heard.words_end_ms)
        if encoded.words_left is not None:  # found with the first chunk after the join
            tl.pending = PendingWords(encoded.words_left, at, join.after)
        else:
            tl.place_words(encoded.written, at, join.after)
    return voiced


def provisional_marks(
    clause: Clause, take: Provisional, start_ms: float, frame_ms: float, is_space: IdTest
) -> list[Mark]:
    """The clause's first marks that sound before the join (from the take's durations)."""
    if not clause.marks:
        return []
    positions = [m.position for m in clause.marks]
    frames = position_frames(clause, positions, take.ids, take.durations, is_space)
    return [
        Mark(m.name, start_ms + f * frame_ms)
        for m, f in zip(clause.marks, frames, strict=True)
        if f < take.frames
    ]


def provisional_time(take: Provisional, start_ms: float, frame_ms: float) -> wordtimes.IdTime:
    """A take's words before the join, from its durations (its ids are the sentence's up
    to past the join)."""
    cum = list(itertools.accumulate(take.durations.tolist(), initial=0.0))
    return lambda p, _: start_ms + cum[min(p, len(cum) - 1)] * frame_ms


def quick_opening(ctx: EncodeContext, ids: IntArray) -> Provisional | None:
    """The first chunk from a quick encoding of the first words; None when no join fits
    the window (then the sentence is encoded whole)."""
    v, s = ctx.voice, ctx.settings
    cut = quick_prefix(ids, v.phonemizer.is_space)
    window = seam_window(ctx, len(ids))
    if cut is None or window is None:
        log.debug("no quick start: prefix at %s, window %s", cut, window)
        return None
    q_ids = np.concatenate([ids[:cut], ids[-1:]])
    enc = v.model.encode_prior(q_ids, anchored(ctx, q_ids, s.scales), s.speaker)
    # The first chunk's right context must be the quick encoding's own.
    inside = enc.frames - v.model.flow_context - s.context
    window = dataclasses.replace(window, hi=min(window.hi, inside))
    ph = v.phonemizer
    seam = choose_seam(q_ids, enc.durations, cut, window, ph.is_space, ph.is_closure, ph.is_pad)
    if seam is None:
        log.debug("no quick start: no phoneme's onset within %s", window)
        return None
    p, frames = seam
    t0 = time.monotonic()
    audio = decode_span(v.model, enc, 0, frames, s.context, v.hop, urgent_decode(ctx))
    decode_s = time.monotonic() - t0
    n = min(ctx.fade, len(audio) // 2)
    keep = len(audio) - n
    stretch = stretch_factor(s, enc, 1.0) if s.stretch_speed is not None else 1.0
    return Provisional(
        p, frames, audio[:keep], audio[keep:], q_ids, enc.durations, decode_s, stretch
    )


def seam_window(ctx: EncodeContext, n_ids: int) -> SeamWindow | None:
    """Frames the quick audio may last before the join: long enough for the whole prior
    and the next window (estimated, ×1.25 + 10 ms), short enough to join within
    QUICK_MAX_MS whatever the mode (a first chunk longer than the plan's costs no time:
    it is decoded in the quick item either way; a join farther on would)."""
    costs, plan = ctx.voice.costs, ctx.plan
    need_s = 1.25 * (costs.prior_s_per_id * n_ids + costs.first_decode_s) + 0.01
    # Both bounds are on the audio as heard: time-stretched (past the voice's speed) a
    # frame is heard that much shorter, so the whole prior needs more frames to hide
    # behind, and the join within QUICK_MAX_MS of listening falls on more of them.
    heard_ms = ctx.frame_ms / split_speed(ctx.settings.stretch_speed or 1.0)[1]
    need = math.ceil(need_s * 1000.0 / heard_ms)
    hi = math.floor(QUICK_MAX_MS / heard_ms)
    lo = max(plan.first_min, need)
    if lo > hi:
        return None
    return SeamWindow(lo, min(hi, max(lo, plan.first_target)), hi)
