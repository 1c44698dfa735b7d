"""One synthesis request as a stream of chunks: encode, chunk plan, windowed decode.

Per clause (a whole sentence, unless it is longer than ``max_sentence_chars``):
phonemize + encode (one work item) → plan chunks at word and pause boundaries from the
durations (:mod:`appliance.core.chunkplan`) → decode each chunk's frames with ``context``
frames of latent on each side and trim (exact: no crossfade is needed inside a clause)
→ fades at clause joins, volume, SSML silence → emit.  The next clause is encoded while
the current one is still being decoded, with a deadline that says when its audio will
be needed.

A request's first sentence, when long, may start from a quick encoding of its first
words (:class:`QuickStart`): the first chunk comes as soon as a short sentence's would,
and from the join on (within the first 250 ms) the audio is the whole sentence's.
No encoder call takes more than ``engine.max_phonemes`` ids (:mod:`appliance.model.engine.bounded`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.core import wordtimes
from appliance.core.chunkplan import (
    QUICK_MAX_MS,
    QUICK_PREFIX_IDS,
    SeamWindow,
    choose_seam,
    chunk_span,
    mode_plan,
    plan_chunks,
    position_frames,
    quick_prefix,
)
from appliance.model.engine.base import Encoded, Scales, VoiceModel
from appliance.model.engine.bounded import encode_bounded, fused_bounded
from appliance.model.engine.windows import decode_span
from appliance.model.stretch import MAX_SPEED, VOICE_SPEED_LIMIT, Stretcher, split_speed
from appliance.speech import Chunk, FloatArray, IntArray, Mark, Word

if TYPE_CHECKING:
    from appliance.core.scheduler import Scheduler, WorkTiming
    from appliance.text.frontend import Clause, ClauseMark, ClausePause
    from appliance.text.phonemize import Phonemizer


log = logging.getLogger(__name__)

STALL_JITTER_S = 0.1
"""A stall is counted when a chunk arrives after a client playing in real time from its
first chunk, with this much jitter buffer, would have run dry (the benchmark's client)."""

PREFETCH_HOLD_S = 1.0
"""A first clause with more audio than this left after its first chunk encodes the next
clause only after its second chunk (see :meth:`SynthesisJob._prefetch`)."""
NEWCOMER_GRACE_S = STALL_JITTER_S / 2
"""How far past the moment a buffer-less player would run dry a stream's work may start
when newcomers' first items go ahead of it: half the jitter buffer, leaving the other
half for the work itself (the scheduler's ``slack_until``)."""

# ------------------------------------------------------------------ audio shaping


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


# ------------------------------------------------------------------ the job


@dataclass
class VoiceCosts:
    """What a voice's parts take on this machine: measured at warm-up, then as served.

    A quick start sizes its first chunk from these, so that the whole sentence's prior is
    done before the listener has played it."""

    prior_s_per_id: float = 2e-4
    """Seconds of prior per phoneme id (a slow core's figure until measured)."""
    first_decode_s: float = 0.012
    """A first chunk's flow and decoder window."""

    def observe_prior(self, ids: int, seconds: float) -> None:
        if ids > 0 and seconds > 0:
            self.prior_s_per_id += 0.25 * (seconds / ids - self.prior_s_per_id)

    def observe_first_decode(self, seconds: float) -> None:
        if seconds > 0:
            self.first_decode_s += 0.25 * (seconds - self.first_decode_s)


@dataclass(frozen=True)
class VoiceRuntime:
    """A voice ready to serve: its phonemizer and its model on the active backend."""

    name: str
    language: str
    sample_rate: int
    hop: int
    phonemizer: Phonemizer
    model: VoiceModel
    can_stream: bool
    defaults: Scales
    default_speaker: int | None
    context: int = 16
    """Decoder frames of latent on each side of a streamed window."""
    costs: VoiceCosts = field(default_factory=VoiceCosts)


@dataclass(frozen=True)
class JobSettings:
    scales: Scales
    speaker: int | None
    mode: str
    realtime: bool
    context: int
    watermark_s: float
    join_fade_ms: float
    volume: float = 1.0
    quick_start: bool = True
    """A long first sentence may start from a quick encoding (see :class:`QuickStart`)."""
    max_phonemes: int = 1024
    """Most ids of one encoder call (:mod:`appliance.model.engine.bounded`)."""
    word_timings: bool = False
    """Chunks carry their words' timings (:mod:`appliance.core.wordtimes`)."""
    stretch_speed: float | None = None
    """A speed past what the voice does well (``appliance.model.stretch``): the voice renders
    at ``scales`` (its limit) and each clause is time-stretched so the whole is this fast."""
    deterministic: bool = False
    """The same audio for the same text: seeded noise (``scales.seed``) and the same
    computation every time — no quick start (its choice depends on timing), the same
    decoder for every window and no decoding ahead (which windows run depends on load)."""


@dataclass
class JobStats:
    t_request: float
    t_first: float | None = None
    frontend_ms: float = 0.0
    first_queue_ms: float = 0.0
    first_encode_ms: float = 0.0
    first_decode_ms: float = 0.0
    first_write_ms: float = 0.0
    first_words_ms: float | None = None
    """With word timings: the word work the first packet waited for (on its work item and
    placing its words on the event loop), which ``encode`` then leaves out; None: not asked."""
    compute_s: float = 0.0
    queue_s: float = 0.0
    audio_s: float = 0.0
    chunks: int = 0
    stalls: int = 0
    windows: int = 0
    quick_start: bool = False
    parts: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        ttfp = (self.t_first - self.t_request) * 1000 if self.t_first is not None else None
        parts = {
            "frontend": round(self.frontend_ms, 2),
            "queue": round(self.first_queue_ms, 2),
            "encode": round(self.first_encode_ms, 2),
            "first_decode": round(self.first_decode_ms, 2),
            "write": round(self.first_write_ms, 2),
        }
        if self.first_words_ms is not None:
            parts["words"] = round(self.first_words_ms, 3)
        return {
            "ttfp_ms": round(ttfp, 2) if ttfp is not None else None,
            "audio_ms": round(self.audio_s * 1000, 1),
            "compute_ms": round(self.compute_s * 1000, 2),
            "queue_ms": round(self.queue_s * 1000, 2),
            "rtf": round(self.compute_s / self.audio_s, 4) if self.audio_s > 0 else None,
            "chunks": self.chunks,
            "stalls": self.stalls,
            "quick_start": self.quick_start,
            "ttfp_parts_ms": parts,
        }


WordKeep = Callable[[wordtimes.WrittenWord], bool]
"""Which of a clause's words a call places."""


def _with_words(
    work: Callable[[], Any], words: wordtimes.WordWork | None
) -> tuple[Any, list[wordtimes.WrittenWord] | None]:
    """A work item's result and, when given, all of a clause's written words (the ones
    its first chunk went out without are found on its next chunk's item)."""
    return work(), words.all() if words is not None else None


Emit = Callable[[Chunk], Awaitable[None]]
"""Hands one chunk to its door (which applies back-pressure by taking its time)."""


class ClauseQueue:
    """A request's clauses as they become known: all at once for a text, segment by
    segment for text that streams in.  Closed when no more will come."""

    def __init__(self, clauses: list[Clause] | None = None, closed: bool = True) -> None:
        self._items: collections.deque[Clause] = collections.deque(clauses or ())
        self._closed = closed
        self._changed = asyncio.Event()
        self.chars_total = sum(len(c.text) for c in self._items)

    def put(self, clauses: list[Clause]) -> None:
        self._items.extend(clauses)
        self.chars_total += sum(len(c.text) for c in clauses)
        self._changed.set()

    def close(self) -> None:
        self._closed = True
        self._changed.set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def exhausted(self) -> bool:
        """No clause is left and none will come."""
        return self._closed and not self._items

    def take_nowait(self) -> Clause | None:
        return self._items.popleft() if self._items else None

    async def take(self) -> Clause | None:
        """The next clause, waiting for it if needed; None once closed and empty."""
        while not self._items:
            if self._closed:
                return None
            self._changed.clear()
            await self._changed.wait()
        return self._items.popleft()


@dataclass
class QuickStart:
    """A long first sentence's first chunk, from a quick encoding of its first words.

    The whole sentence's prior costs ~0.1 ms per phoneme id here (31 ms for 150
    characters), the first words' ~8 ms: the first chunk comes from those, the whole
    sentence is encoded while it plays, and the two join at a word gap (``seam`` ids in,
    where both have the same phonemes) inside the first :data:`QUICK_MAX_MS`.  From the
    join on, the audio is the whole sentence's own; a crossfade of ``join_fade_ms`` just
    before it hides the seam."""

    seam: int
    """The join comes after this many phoneme ids (the same in both encodings)."""
    frames: int
    """Frames of the quick audio before the join."""
    audio: FloatArray
    """Those frames' samples but the last ``tail``."""
    tail: FloatArray
    """The samples crossfaded with the whole sentence's just before the join."""
    ids: IntArray
    durations: FloatArray
    """The quick encoding's ids and their frames (its marks come from these)."""
    decode_s: float = 0.0
    """The first chunk's flow and decoder time."""
    stretch: float = 1.0
    """Past the voice's speed: the time-stretch of the quick audio (from its own frames,
    as :meth:`SynthesisJob._stretch_factor` has it for a whole clause)."""


@dataclass
class _Encoded:
    ids: IntArray
    enc: Encoded | None
    audio: FloatArray | None  # whole-clause audio for voices that cannot stream
    # The first clause of a request also carries its chunk plan and first chunk, decoded
    # in the same work item: a separate item would queue behind other streams' work
    # while the listener waits for the first sound.
    chunks: list[tuple[int, int]] | None = None
    target: int = 0
    first_audio: FloatArray | None = None
    first_decode_s: float = 0.0
    quick: QuickStart | None = None
    written: list[wordtimes.WrittenWord] | None = None
    """With word timings: the clause's written words and their ids (made on the worker:
    the alignment may phonemize words); for a request's first clause, only the first
    ones (those its first chunk needs) while ``words_left`` is set."""
    words_left: wordtimes.WordWork | None = None
    """The rest of a first clause's word work, done on its next chunk's work item: off
    the first packet's path (issue 29's cost)."""
    words_s: float = 0.0
    """Seconds this item spent finding words (a first clause's: ``JobStats.first_words_ms``)."""


@dataclass
class _WordsDue:
    """A clause's words found after its first chunk went out: where they sound (``at``),
    which of them to place (``keep``: those not placed with the first chunk)."""

    work: wordtimes.WordWork
    at: wordtimes.IdTime
    keep: WordKeep


@dataclass
class _Voiced:
    """How one clause's frames become output: its chunks and where its audio goes in time."""

    clause: Clause
    encoded: _Encoded
    chunks: list[tuple[int, int]]
    total: int
    """Frames of the clause (of its whole encoding)."""
    speech_ms: float
    """Output time where the clause's frame 0 sounds (after its ``pause_before_ms``); after a
    quick start, where it would have to for frame ``seam`` to sound at the join."""
    pauses: dict[int, int] = field(default_factory=dict)
    """Frame → ms of silence spliced in after it (SSML breaks between words)."""
    seam: int = 0
    """A quick start: the whole encoding's frame its audio joins at."""
    lead: FloatArray | None = None
    """Samples that go before the next chunk's (a quick start's crossfade)."""
    words_due: _WordsDue | None = None
    """Words still to find and place, with the next chunk decoded."""

    def at_ms(self, frame: float, frame_ms: float, after: Callable[[int], bool]) -> float:
        """Output time of a frame; a pause at that very frame counts when ``after`` it."""
        quiet = (  # twice per word on the first packet's path: most clauses have no pause
            sum(ms for f, ms in self.pauses.items() if f < frame or (f == frame and after(f)))
            if self.pauses
            else 0
        )
        return self.speech_ms + frame * frame_ms + quiet


@dataclass
class _Shaped:
    """A chunk's speech and the silence around it (SSML breaks, a clause's pauses): kept
    apart because a time-stretch shortens the speech only — a ``<break time="800ms"/>``
    lasts 800 ms at any speed, as SSML says, and marks and word timings count it whole."""

    speech: FloatArray
    before: int = 0
    """Samples of silence before the speech ..."""
    after: int = 0
    """... and after it."""


class SynthesisJob:
    """Produces the chunks of one request, with deadlines, on the shared scheduler."""

    def __init__(
        self,
        voice: VoiceRuntime,
        clauses: ClauseQueue,
        settings: JobSettings,
        scheduler: Scheduler,
        stats: JobStats,
    ) -> None:
        self.voice = voice
        self.clauses = clauses
        self.settings = settings
        self.scheduler = scheduler
        self.stats = stats
        self._frame_ms = 1000.0 * voice.hop / voice.sample_rate
        self._plan = mode_plan(settings.mode, self._frame_ms)
        self._target = self._plan.first_target
        """The next chunk's size in frames (chunks grow through the request)."""
        self._audio_out_s = 0.0
        self._fade = round(voice.sample_rate * settings.join_fade_ms / 1000.0)
        self._stretch = (
            Stretcher(voice.sample_rate, settings.stretch_speed / VOICE_SPEED_LIMIT)
            if settings.stretch_speed is not None
            else None
        )
        self._last_span = (0, 0)
        self._chars_done = 0
        """Characters of the clauses whose audio is fully written (admission's estimate)."""
        self._clauses_done = 0
        self._seq = 0
        self._marks: collections.deque[Mark] = collections.deque()
        """SSML marks placed in the audio but not yet sent with a chunk, in order."""
        self._words: collections.deque[Word] | None = (
            collections.deque() if settings.word_timings else None
        )
        """With word timings: words placed in the audio but not yet sent, in order."""
        self._next: tuple[Clause, asyncio.Future[Any]] | None = None
        """The next clause and its encode, submitted while this one plays."""

    def _take_marks(self, end_ms: float, everything: bool) -> tuple[Mark, ...]:
        """The marks that fall before ``end_ms`` (all of them for the request's last chunk)."""
        out: list[Mark] = []
        # A mark on a chunk boundary belongs to the chunk that starts there (the two
        # numbers come from frames through different float paths: allow a microsecond).
        while self._marks and (everything or self._marks[0].offset_ms < end_ms - 1e-3):
            out.append(self._marks.popleft())
        return tuple(out)

    def _take_words(self, end_ms: float, everything: bool) -> tuple[Word, ...] | None:
        """The words that start before ``end_ms`` (None: word timings were not asked)."""
        if self._words is None:
            return None
        out: list[Word] = []
        # Words start on frames, chunks end on frames plus whole-sample silences: a word
        # within half a frame of the end starts the next chunk.
        edge = end_ms - self._frame_ms / 2
        while self._words and (everything or self._words[0].offset_ms < edge):
            out.append(self._words.popleft())
        return tuple(out)

    def _place_words(
        self,
        words: list[wordtimes.WrittenWord] | None,
        at: wordtimes.IdTime,
        keep: WordKeep | None = None,
    ) -> float:
        """Queue written words (those ``keep`` takes) at their output times (``at``);
        returns the last one's end (0.0: none)."""
        if self._words is None or words is None:
            return 0.0
        t0 = time.perf_counter()
        if keep is not None:
            words = [w for w in words if keep(w)]
        timed = wordtimes.timed_words(words, at)
        self._words.extend(timed)
        if self.stats.t_first is None and self.stats.first_words_ms is not None:
            self.stats.first_words_ms += (time.perf_counter() - t0) * 1000
        return timed[-1].offset_ms + timed[-1].duration_ms if timed else 0.0

    def _word_work(self, clause: Clause, ids: IntArray) -> wordtimes.WordWork:
        ph = self.voice.phonemizer
        return wordtimes.WordWork.of(clause.text, clause.word_spans, ids, ph.kinds, ph.word_size)

    def _find_words(self, clause: Clause, out: _Encoded, first: bool) -> None:
        """The clause's written words; a request's first clause finds those its first chunk
        needs now, the rest with its next chunk (:class:`wordtimes.WordWork`)."""
        work = self._word_work(clause, out.ids)
        position = self._first_chunk_ids(out) if first else None
        if position is None:
            out.written = work.all()
            return
        out.written = work.before(position)
        out.words_left = work if work.pending else None

    def _first_chunk_ids(self, out: _Encoded) -> int | None:
        """An id position every word the first chunk may carry starts before (None: no
        first chunk of its own, it needs them all)."""
        if out.quick is not None:  # words that start after the join are the whole's
            return out.quick.seam
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

    def _next_ms(self) -> float:
        """Where the next speech starts in the output: after what was sent and what the
        time-stretch still holds of the speech before (libsonic keeps ~20 ms across
        chunks; words placed from the sent audio alone came that much early)."""
        held = self._stretch.held if self._stretch is not None else 0.0
        return (self._audio_out_s + held / self.voice.sample_rate) * 1000

    def _out_frame_ms(self) -> float:
        """A frame's ms in the output: a stretched clause (speed past the voice's limit) is
        that much shorter."""
        return self._frame_ms / (self._stretch.factor if self._stretch is not None else 1.0)

    def _id_time(self, voiced: _Voiced) -> wordtimes.IdTime:
        """Output ms of an id position of the clause (see :data:`wordtimes.IdTime`)."""
        fm = self._out_frame_ms()
        enc = voiced.encoded.enc
        if enc is None:  # a whole-clause voice: in proportion to the ids
            n = max(1, len(voiced.encoded.ids))
            return lambda p, after: voiced.at_ms(p / n * voiced.total, fm, lambda _: after)
        cum = wordtimes.FrameSums(enc.durations)
        return lambda p, after: voiced.at_ms(cum[p], fm, lambda _: after)

    def _quick_time(self, quick: QuickStart, start_ms: float) -> wordtimes.IdTime:
        """A quick start's words before the join, from the quick encoding's durations (its
        ids are the sentence's up to past the join)."""
        fm = self._out_frame_ms()
        qcum = list(itertools.accumulate(quick.durations.tolist(), initial=0.0))
        return lambda p, _: start_ms + qcum[min(p, len(qcum) - 1)] * fm

    # -- deadlines

    def _due(self, ahead_s: float = 0.0) -> float:
        """When the client will need audio beyond what it has (+ ``ahead_s`` more)."""
        now = time.monotonic()
        if self.stats.t_first is None:
            return now
        return self.stats.t_first + self._audio_out_s + ahead_s - self.settings.watermark_s

    def _slack_until(self, ahead_s: float = 0.0) -> float | None:
        """The latest start for work a listener playing since its first chunk still gets in
        time (None before the first chunk: nothing is playing, nothing can wait)."""
        if self.stats.t_first is None:
            return None
        return self.stats.t_first + self._audio_out_s + ahead_s + NEWCOMER_GRACE_S

    def buffer_s(self) -> float:
        """Audio the client holds but has not played yet (if it plays in real time)."""
        if self.stats.t_first is None:
            return 0.0
        return max(0.0, self.stats.t_first + self._audio_out_s - time.monotonic())

    def remaining_audio_s(self) -> float | None:
        """Estimate of the audio still to come, from the characters left; None before any."""
        if self._audio_out_s <= 0 or self._chars_done <= 0:
            return None
        per_char = self._audio_out_s / self._chars_done
        return max(0.0, (self.clauses.chars_total - self._chars_done) * per_char)

    def _submit(
        self, fn: Callable[[], Any], kind: str, ahead_s: float = 0.0, urgent: bool = False
    ) -> asyncio.Future[tuple[Any, WorkTiming]]:
        """Run ``fn`` on the scheduler, due when the listener needs ``ahead_s`` more audio
        than it has; the future's result is counted in the stats when it is awaited."""
        fut = self.scheduler.submit(
            fn,
            deadline=self._due(ahead_s),
            realtime=self.settings.realtime,
            owner=self,
            kind=kind,
            urgent=urgent,
            slack_until=self._slack_until(ahead_s),
        )
        return asyncio.ensure_future(self._counted(fut))

    async def _counted(self, fut: Awaitable[tuple[Any, WorkTiming]]) -> tuple[Any, WorkTiming]:
        result, timing = await fut
        self.stats.compute_s += timing.run_s
        self.stats.queue_s += timing.queue_s
        return result, timing

    def cancel_pending(self) -> int:
        return self.scheduler.cancel_owner(self)

    # -- work items (run on worker threads)

    def _ids(self, clause: Clause) -> IntArray:
        ph = self.voice.phonemizer
        if clause.phonemes:  # SSML <phoneme>, lexicon IPA entries
            return ph.ids_for(ph.phonemes_with(clause.text, clause.phonemes))
        return ph.ids(clause.text)

    def _bounded(self, ids: IntArray, scales: Scales, prior: bool) -> tuple[IntArray, Encoded]:
        v, s = self.voice, self.settings
        scales = self._anchored(ids, scales)
        return encode_bounded(
            v.model, ids, scales, s.speaker, s.max_phonemes, v.phonemizer.is_boundary, prior
        )

    def _anchored(self, ids: IntArray, scales: Scales) -> Scales:
        """Re-timed, every word starts where the rate puts it (to half a frame: word
        timings scale with the speed), not wherever the roundings before it land it."""
        if scales.rate == 1.0 or not self.voice.model.retimes:
            return scales
        starts = wordtimes.spoken_words(ids, self.voice.phonemizer.kinds)
        return dataclasses.replace(scales, anchors=tuple(a for a, _ in starts))

    def _encode(self, clause: Clause, first_target: int | None = None) -> _Encoded:
        """Phonemize and encode a clause; with ``first_target``, also plan it and decode
        its first chunk (the first clause of a request), from a quick start if it has one;
        with word timings, find its written words' ids."""
        ids = self._ids(clause)
        out = self._encode_ids(clause, ids, first_target)
        if self._words is not None:
            t0 = time.perf_counter()
            self._find_words(clause, out, first_target is not None)
            out.words_s = time.perf_counter() - t0
        return out

    def _encode_ids(self, clause: Clause, ids: IntArray, first_target: int | None) -> _Encoded:
        v, s = self.voice, self.settings
        scales = self._rate_scales(ids, clause.speed) if clause.speed != 1.0 else s.scales
        if not v.can_stream:
            audio = fused_bounded(
                v.model, ids, scales, s.speaker, s.max_phonemes, v.phonemizer.is_boundary
            )
            return _Encoded(ids, None, audio)
        if first_target is None:
            return _Encoded(*self._bounded(ids, scales, prior=False), None)
        if self._quick_allowed(clause, ids):
            quick = self._quick(ids)
            if quick is not None:
                return _Encoded(ids, None, None, quick=quick, first_decode_s=quick.decode_s)
        # The first clause: the flow runs over the first chunk's frames only (in
        # decode_span); the rest of it comes with the second chunk.
        ids, enc = self._bounded(ids, scales, prior=True)
        out = _Encoded(ids, enc, None)
        out.chunks, out.target = self._plan_clause(out, clause, first_target, first=True)
        if out.chunks:
            t0 = time.monotonic()
            a, b = out.chunks[0]
            out.first_audio = decode_span(
                v.model, enc, a, b, s.context, v.hop, self._urgent_decode()
            )
            out.first_decode_s = time.monotonic() - t0
            v.costs.observe_first_decode(out.first_decode_s)
        return out

    def _urgent_decode(self) -> bool:
        # A first chunk of a streaming plan is what a real-time listener waits for: the
        # backend's fastest decoder, if the cores it spreads over are free.  In a burst,
        # and for a whole-sentence chunk (mode sentence, what Piper does) or a batch
        # request, the cheapest (appliance.model.conv2d): 16 vs 21 ms of CPU.
        s = self.settings
        return (
            s.realtime
            and not s.deterministic
            and not self._plan.whole
            and not self.scheduler.crowded()
        )

    def _quick_allowed(self, clause: Clause, ids: IntArray) -> bool:
        """A quick start pays for itself on a long first sentence a listener waits for, when
        the cores are free to run the whole sentence's prior right after it."""
        s = self.settings
        return (
            s.quick_start
            and not s.deterministic
            and s.realtime
            and not self._plan.whole
            and clause.speed == 1.0
            and not clause.pauses
            and 2 * QUICK_PREFIX_IDS <= len(ids) <= s.max_phonemes
            and not self.scheduler.crowded()
        )

    def _quick(self, ids: IntArray) -> QuickStart | None:
        """The first chunk from a quick encoding of the first words (see QuickStart); None
        when no join fits the window (then the caller encodes the sentence whole)."""
        v, s = self.voice, self.settings
        cut = quick_prefix(ids, v.phonemizer.is_space)
        window = self._seam_window(len(ids))
        if cut is None or window is None:
            log.debug("no quick start: prefix at %s, window %s", cut, window)
            return None
        q_ids = np.concatenate([ids[:cut], ids[-1:]])
        enc = v.model.encode_prior(q_ids, self._anchored(q_ids, s.scales), s.speaker)
        # The first chunk's right context must be the quick encoding's own.
        inside = enc.frames - v.model.flow_context - s.context
        window = dataclasses.replace(window, hi=min(window.hi, inside))
        ph = v.phonemizer
        seam = choose_seam(q_ids, enc.durations, cut, window, ph.is_space, ph.is_closure)
        if seam is None:
            log.debug("no quick start: no word gap or stop within %s", window)
            return None
        p, frames = seam
        t0 = time.monotonic()
        audio = decode_span(v.model, enc, 0, frames, s.context, v.hop, self._urgent_decode())
        decode_s = time.monotonic() - t0
        v.costs.observe_first_decode(decode_s)
        n = min(self._fade, len(audio) // 2)
        keep = len(audio) - n
        stretch = self._stretch_factor(enc, 1.0) if s.stretch_speed is not None else 1.0
        return QuickStart(
            p, frames, audio[:keep], audio[keep:], q_ids, enc.durations, decode_s, stretch
        )

    def _seam_window(self, n_ids: int) -> SeamWindow | None:
        """Frames the quick audio may last before the join: long enough for the whole
        prior and the next window (estimated, ×1.25 + 10 ms), short enough to join within
        QUICK_MAX_MS whatever the mode (a first chunk longer than the plan's costs no time:
        it is decoded in the quick item either way; a join farther on would)."""
        v, plan = self.voice, self._plan
        need_s = 1.25 * (v.costs.prior_s_per_id * n_ids + v.costs.first_decode_s) + 0.01
        # Both bounds are on the audio as heard: time-stretched (past the voice's speed) a
        # frame is heard that much shorter, so the whole prior needs more frames to hide
        # behind, and the join within QUICK_MAX_MS of listening falls on more of them.
        heard_ms = self._frame_ms / split_speed(self.settings.stretch_speed or 1.0)[1]
        need = math.ceil(need_s * 1000.0 / heard_ms)
        hi = math.floor(QUICK_MAX_MS / heard_ms)
        lo = max(plan.first_min, need)
        if lo > hi:
            return None
        return SeamWindow(lo, min(hi, max(lo, plan.first_target)), hi)

    def _whole_prior(self, ids: IntArray) -> Encoded:
        """The whole sentence's prior, after its quick start (its time teaches the estimate)."""
        t0 = time.monotonic()
        _, enc = self._bounded(ids, self.settings.scales, prior=True)
        self.voice.costs.observe_prior(len(ids), time.monotonic() - t0)
        return enc

    def _decode(self, enc: Encoded, a: int, b: int) -> FloatArray:
        """A later chunk's frames; decoded ahead only while no other work waits: in a
        burst of newcomers, a second chunk that ran the rest of its clause's flow and
        decoded 4× its frames took ~50 ms, and the last streams' second chunks came
        after their listeners had run dry."""
        ahead = not self.settings.deterministic and not self.scheduler.crowded()
        return decode_span(
            self.voice.model, enc, a, b, self.settings.context, self.voice.hop, ahead=ahead
        )

    def _rate_scales(self, ids: IntArray, speed: float) -> Scales:
        """Scales that make a clause ``speed`` times as fast (SSML ``<prosody rate>``).

        A backend that re-times the prior (:attr:`VoiceModel.retimes`) does it exactly.
        Otherwise dividing ``length_scale`` by the factor is not enough: the voice rounds
        every phoneme's duration *up* to whole frames, so short phonemes barely stretch
        (rate x-slow gave 1.72× the length, not 2×).  One durations-only pass at the
        request's scale calibrates it: frames(L) ≈ D·L + n/2 for n phonemes (the ceiling
        adds half a frame each on average), solved for the target length.  Whole-clause
        voices get the plain division.
        """
        s = self.settings.scales
        if self.voice.model.retimes:
            return dataclasses.replace(s, rate=s.rate * speed)
        s = dataclasses.replace(s, length_scale=s.length_scale / s.rate, rate=1.0)
        naive = dataclasses.replace(s, length_scale=s.length_scale / speed)
        if not self.voice.can_stream:
            return naive
        base = self._bounded(ids, s, prior=True)[1].durations
        n = float(np.count_nonzero(base))
        frames = float(base.sum())
        per_scale = (frames - n / 2) / s.length_scale
        if per_scale <= 0:
            return naive
        scale = (frames / speed - n / 2) / per_scale
        return dataclasses.replace(s, length_scale=max(0.1 * naive.length_scale, scale))

    def _plan_clause(
        self, encoded: _Encoded, clause: Clause, target: int, first: bool, start: int = 0
    ) -> tuple[list[tuple[int, int]], int]:
        assert encoded.enc is not None
        ph = self.voice.phonemizer
        boundary = [ph.is_boundary(int(i)) for i in encoded.ids]
        forced = [round(f) for f in self._pause_frames(clause, encoded)]
        return plan_chunks(
            encoded.enc.durations, boundary, self._plan, target, first, start, forced
        )

    def _pause_frames(self, clause: Clause, encoded: _Encoded) -> list[float]:
        if not clause.pauses or encoded.enc is None:
            return []
        positions = [p.position for p in clause.pauses]
        ph = self.voice.phonemizer
        return position_frames(clause, positions, encoded.ids, encoded.enc.durations, ph.is_space)

    # -- the stream

    async def run(self, emit: Emit) -> None:
        try:
            await self._run(emit)
        finally:
            # Drops this job's queued items and cancels their futures, which also
            # ends a prefetched encode still waiting in the queue.
            self.cancel_pending()
            if self._next is not None:
                self._next[1].cancel()

    async def _run(self, emit: Emit) -> None:
        clause = await self.clauses.take()
        while clause is not None:
            encoded = await self._encoded(clause)
            if encoded.quick is not None:
                voiced = await self._quick_start(clause, encoded, emit)
            else:
                voiced = self._voiced(clause, encoded)
            await self._speak(voiced, emit)
            self._chars_done += len(clause.text)
            self._clauses_done += 1
            clause = await self._following()
        if self._stretch is not None:
            # A text stream's last chunk was not known as last: the stretcher's tail now.
            tail = self._output(_Shaped(np.zeros(0, np.float32)), final=True)
            if len(tail):
                await self._send(_Shaped(tail), self._last_span, False, True, emit)

    async def _encoded(self, clause: Clause) -> _Encoded:
        """The clause's encoding: prefetched, or the request's first item (urgent: work
        ahead of time steps aside for it, see the scheduler)."""
        if self._next is not None and self._next[0] is clause:
            fut = self._next[1]
            self._next = None
            return (await fut)[0]  # type: ignore[no-any-return]
        first = self._clauses_done == 0
        work = functools.partial(self._encode, clause, self._target if first else None)
        encoded, timing = await self._submit(work, "encode", urgent=first)
        if first:
            self.stats.first_queue_ms = timing.queue_s * 1000
            self.stats.first_encode_ms = (
                timing.run_s - encoded.first_decode_s - encoded.words_s
            ) * 1000
            self.stats.first_decode_ms = encoded.first_decode_s * 1000
            if self._words is not None:
                self.stats.first_words_ms = encoded.words_s * 1000
        return encoded  # type: ignore[no-any-return]

    async def _following(self) -> Clause | None:
        if self._next is not None:
            return self._next[0]
        return await self.clauses.take()

    def _prefetch(self, ahead_s: float) -> None:
        """Encode the next clause now, due when this clause's audio runs out.

        Only after this clause's first chunk is out: submitted earlier, it would take a
        free worker from the window the listener waits for.  And while only the request's
        first chunk is out and this clause has more than :data:`PREFETCH_HOLD_S` of audio
        left, not yet: the second chunk's item (the flow over the rest of the first
        sentence) must land within the first chunk's ~0.12 s, and an encode beside it took
        half the cores (it ran 0.23–0.29 s against the 0.22 s it had: a stall).  (Text that
        streams in may bring it later, after any chunk.)"""
        if self._seq <= 1 and ahead_s > PREFETCH_HOLD_S:
            return
        if self._next is None and (nxt := self.clauses.take_nowait()) is not None:
            work = functools.partial(self._encode, nxt)
            self._next = (nxt, self._submit(work, "encode", ahead_s))

    def _voiced(self, clause: Clause, encoded: _Encoded, start: int = 0) -> _Voiced:
        if encoded.enc is not None:
            if encoded.chunks is not None:
                chunks, self._target = encoded.chunks, encoded.target
            else:
                first = self._clauses_done == 0 and start == 0
                chunks, self._target = self._plan_clause(
                    encoded, clause, self._target, first, start
                )
            total = encoded.enc.frames
        else:
            assert encoded.audio is not None
            total = len(encoded.audio) // self.voice.hop
            chunks = [(0, total)] if len(encoded.audio) else []
        voiced = _Voiced(clause, encoded, chunks, total, self._next_ms() + clause.pause_before_ms)
        for f, p in zip(self._pause_frames(clause, encoded), clause.pauses, strict=True):
            key = min(total, round(f))
            voiced.pauses[key] = voiced.pauses.get(key, 0) + p.ms
        return voiced

    def _place_marks(self, voiced: _Voiced, skip: int = 0) -> None:
        """Queue the clause's SSML marks (all but the first ``skip``) at their output times."""
        clause, enc = voiced.clause, voiced.encoded.enc
        marks = clause.marks[skip:]
        if not marks:
            return
        if enc is None:  # a whole-clause voice: in proportion to the characters
            n = max(1, len(clause.text))
            frames = [m.position / n * voiced.total for m in marks]
        else:
            positions = [m.position for m in marks]
            ids = voiced.encoded.ids
            frames = position_frames(clause, positions, ids, enc.durations, self._is_space)
        pause_frames = self._pause_frames(clause, voiced.encoded)
        by_frame = {round(f): p for f, p in zip(pause_frames, clause.pauses, strict=True)}
        frame_ms = self._out_frame_ms()
        for mark, f in zip(marks, frames, strict=True):
            pause = by_frame.get(round(f))

            def after(_: int, mark: ClauseMark = mark, pause: ClausePause | None = pause) -> bool:
                return pause is not None and pause.source_offset < mark.source_offset

            self._marks.append(Mark(mark.name, voiced.at_ms(f, frame_ms, after)))

    def _is_space(self, phoneme_id: int) -> bool:
        return self.voice.phonemizer.is_space(phoneme_id)

    async def _quick_start(self, clause: Clause, encoded: _Encoded, emit: Emit) -> _Voiced:
        """Send a quick start's first chunk, encode the whole sentence meanwhile, and
        return the rest of the clause planned from the join."""
        quick = encoded.quick
        assert quick is not None
        # Submitted before the first chunk goes out (emit may wait for a slow reader).
        whole = self._submit(functools.partial(self._whole_prior, encoded.ids), "encode")
        self.stats.quick_start = True
        if self._stretch is not None:  # before the first marks and words are timed
            self._stretch.set_factor(quick.stretch)
        start_ms = self._next_ms() + clause.pause_before_ms
        first_marks = self._quick_marks(clause, quick, start_ms)
        self._marks.extend(first_marks)
        seam_id = quick.seam

        def heard_first(w: wordtimes.WrittenWord) -> bool:
            # Some of its sound is before the join (more than the pad before its first
            # sounding id): it goes with the first chunk, timed by the quick encoding.
            return w.start < seam_id - 1 or w.end <= seam_id

        quick_end = 0.0
        if self._words is not None:  # (the id → ms maps are only made for words)
            quick_time = self._quick_time(quick, start_ms)
            quick_end = self._place_words(encoded.written, quick_time, heard_first)
        before = silence_samples(clause.pause_before_ms, self.voice.sample_rate)
        span = chunk_span(clause, 0, quick.seam, len(encoded.ids))
        await self._send(_Shaped(self._gain(quick.audio, clause), before), span, False, False, emit)
        self.stats.windows += 1
        self._target = min(self._plan.cap, max(self._target, 2 * quick.frames))
        enc, _ = await whole
        rest = _Encoded(encoded.ids, enc, None)
        if self._stretch is not None:  # the whole sentence's, before the rest is timed
            self._stretch.set_factor(self._stretch_factor(enc, clause.speed))
        seam = int(np.cumsum(enc.durations)[quick.seam - 1])
        voiced = self._voiced(clause, rest, start=seam)
        # The join sounds after the quick audio sent (stretched at its own factor) and its
        # tail, which is crossfaded into the whole's first chunk (at the whole's factor).
        fm = self._out_frame_ms()
        tail_ms = len(quick.tail) / self.voice.sample_rate * 1000 * fm / self._frame_ms
        voiced.speech_ms = self._next_ms() + tail_ms - seam * fm
        voiced.seam, voiced.lead = seam, quick.tail
        self._place_marks(voiced, skip=len(first_marks))
        if self._words is not None:
            # The rest from the whole encoding.  The first of them starts at the join at the
            # earliest (its pad before it is the quick audio's), and not before the end of a
            # word the join cut (at a stop): that word went with the first chunk, its end
            # from the quick encoding's frames, a frame or so off the whole's.
            at = self._id_time(voiced)

            def whole_at(p: int, start: bool) -> float:
                t = at(max(p, seam_id), start)
                return max(t, quick_end) if start else t

            def after_join(w: wordtimes.WrittenWord) -> bool:
                return not heard_first(w)

            if encoded.words_left is not None:  # found with the first chunk after the join
                voiced.words_due = _WordsDue(encoded.words_left, whole_at, after_join)
            else:
                self._place_words(encoded.written, whole_at, after_join)
        return voiced

    def _quick_marks(self, clause: Clause, quick: QuickStart, start_ms: float) -> list[Mark]:
        """The clause's first marks that sound before the join (from the quick durations)."""
        if not clause.marks:
            return []
        positions = [m.position for m in clause.marks]
        frames = position_frames(clause, positions, quick.ids, quick.durations, self._is_space)
        fm = self._out_frame_ms()
        return [
            Mark(m.name, start_ms + f * fm)
            for m, f in zip(clause.marks, frames, strict=True)
            if f < quick.frames
        ]

    async def _speak(self, voiced: _Voiced, emit: Emit) -> None:
        """Decode, shape and send one clause's chunks."""
        clause, encoded = voiced.clause, voiced.encoded
        if self._stretch is not None:
            self._stretch.set_factor(self._stretch_factor(encoded.enc, clause.speed))
        if encoded.quick is None and voiced.seam == 0:  # a quick start placed its own
            self._place_marks(voiced)
            if self._words is not None:
                self._place_first_words(voiced)
        hop, rate = self.voice.hop, self.voice.sample_rate
        clause_audio_s = (voiced.total - voiced.seam) * hop / rate
        clause_out_s = 0.0
        for j, (a, b) in enumerate(voiced.chunks):
            audio = await self._chunk_audio(voiced, j, a, b)
            last = j == len(voiced.chunks) - 1
            if last and voiced.words_due is not None:  # no work item of its own carried them
                self._place_due(voiced, voiced.words_due.work.all())
            more = not self.clauses.exhausted or self._next is not None
            await self._send(
                self._shape(voiced, audio, a, b, j == 0, last and more),
                chunk_span(clause, a, b, voiced.total),
                last and clause.sentence_end,
                last and not more,
                emit,
            )
            clause_out_s += (b - a) * hop / rate
            self._prefetch(clause_audio_s - clause_out_s)

    def _place_first_words(self, voiced: _Voiced) -> None:
        """Queue the clause's words; those a first clause found after its first chunk are
        placed when they are (:meth:`_place_due`)."""
        encoded, at = voiced.encoded, self._id_time(voiced)
        self._place_words(encoded.written, at)
        if encoded.words_left is not None:
            placed = encoded.written[-1].start if encoded.written else -1

            def unplaced(w: wordtimes.WrittenWord) -> bool:
                return w.start > placed  # written words start in order, none at the same id

            voiced.words_due = _WordsDue(encoded.words_left, at, unplaced)

    def _place_due(self, voiced: _Voiced, words: list[wordtimes.WrittenWord] | None) -> None:
        due = voiced.words_due
        if due is not None and words is not None:
            self._place_words(words, due.at, due.keep)
            voiced.words_due = None

    def _stretch_factor(self, enc: Encoded | None, clause_speed: float) -> float:
        """This clause's stretch, so that its length is ``1 / stretch_speed`` of the voice's
        own at speed 1 (its SSML rate kept).  Re-timed frames come with their length at rate
        1 (``base_frames``): the stretch makes up exactly what the re-timing could not (a
        phoneme keeps at least a frame).  Through the length scale, the voice rounds each
        phoneme up to whole frames, so it is less than ``VOICE_SPEED_LIMIT`` times as fast:
        from its frames at that scale, frames(L) ≈ D·L + n/2 (n phonemes: the ceiling adds
        half a frame each) gives the length at the default scale (as ``_rate_scales``
        calibrates SSML rates)."""
        speed = self.settings.stretch_speed
        assert speed is not None
        plain = speed / VOICE_SPEED_LIMIT
        if enc is None:
            return plain
        base = enc.base_frames
        if base:
            rate = self.settings.scales.rate * clause_speed
            residual = float(enc.durations.sum()) * rate / base
            return min(MAX_SPEED, max(1.0, plain * residual))
        durations = enc.durations
        frames, n = float(durations.sum()), float(np.count_nonzero(durations))
        scale = self.settings.scales.length_scale / self.settings.scales.rate
        per_scale = (frames - n / 2) / scale
        full = per_scale * scale * VOICE_SPEED_LIMIT + n / 2
        if per_scale <= 0 or frames <= 0:
            return plain
        return min(MAX_SPEED, max(1.0, speed * frames / full))

    async def _chunk_audio(self, voiced: _Voiced, j: int, a: int, b: int) -> FloatArray:
        encoded = voiced.encoded
        self.stats.windows += 1
        if j == 0 and encoded.first_audio is not None:
            return encoded.first_audio
        if encoded.enc is None:
            assert encoded.audio is not None
            return encoded.audio
        # The first chunk after a quick start's join: one frame more, whose last samples
        # are crossfaded with the quick audio's.
        lead = voiced.lead
        decode = functools.partial(self._decode, encoded.enc, a if lead is None else a - 1, b)
        due = voiced.words_due
        (audio, words), timing = await self._submit(
            functools.partial(_with_words, decode, due.work if due is not None else None),
            "decode",
        )
        self._place_due(voiced, words)
        if self._seq == 0:
            self.stats.first_decode_ms = timing.run_s * 1000
        if lead is None:
            return audio  # type: ignore[no-any-return]
        hop = self.voice.hop
        voiced.lead = None
        return np.concatenate([crossfade(lead, audio[hop - len(lead) : hop]), audio[hop:]])

    def _gain(self, audio: FloatArray, clause: Clause) -> FloatArray:
        gain = self.settings.volume * clause.volume
        return audio * np.float32(gain) if gain != 1.0 else audio

    def _shape(
        self,
        voiced: _Voiced,
        audio: FloatArray,
        a: int,
        b: int,
        first: bool,
        fade_out: bool,
    ) -> _Shaped:
        """Fades at clause joins and around SSML breaks, volume, and the breaks' silence."""
        clause, rate = voiced.clause, self.voice.sample_rate
        joined = first and self._clauses_done > 0 and voiced.seam == 0
        pause_in = a in voiced.pauses and a > 0
        pause_out = b in voiced.pauses
        audio = fade(
            audio,
            self._fade if joined or pause_in else 0,
            self._fade if fade_out or pause_out else 0,
        )
        shaped = _Shaped(self._gain(audio, clause))
        if first and voiced.seam == 0:
            shaped.before = silence_samples(clause.pause_before_ms + voiced.pauses.get(0, 0), rate)
        if pause_out and b > 0:
            shaped.after += silence_samples(voiced.pauses[b], rate)
        if b == voiced.total and clause.pause_after_ms:
            shaped.after += silence_samples(clause.pause_after_ms, rate)
        return shaped

    def _output(self, shaped: _Shaped, final: bool) -> FloatArray:
        """A chunk's samples: its speech time-stretched when the request is past the voice's
        speed, its silence as long as asked (libsonic is flushed before a silence, so the
        speech it holds back comes out before it, not after)."""
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

    async def _send(
        self,
        shaped: _Shaped,
        span: tuple[int, int],
        sentence_end: bool,
        final: bool,
        emit: Emit,
    ) -> None:
        """Count a stall if the listener ran dry, attach the marks, emit the chunk."""
        audio = self._output(shaped, final)
        self._last_span = span
        now = time.monotonic()
        run_dry = (self.stats.t_first or now) + self._audio_out_s + STALL_JITTER_S
        if self.stats.t_first is not None and now > run_dry:
            # A player with a minimal jitter buffer ran out of audio before this chunk.
            self.stats.stalls += 1
        dur_s = len(audio) / self.voice.sample_rate
        end_ms = (self._audio_out_s + dur_s) * 1000
        chunk = Chunk(
            seq=self._seq,
            samples=audio,
            sample_rate=self.voice.sample_rate,
            offset_ms=self._audio_out_s * 1000,
            duration_ms=dur_s * 1000,
            text_span=span,
            sentence_end=sentence_end,
            final=final,
            marks=self._take_marks(end_ms, everything=final),
            words=self._take_words(end_ms, everything=final),
        )
        t_w = time.monotonic()
        await emit(chunk)
        if self._seq == 0:
            self.stats.t_first = t_w
            self.stats.first_write_ms = (time.monotonic() - t_w) * 1000
        self._seq += 1
        self._audio_out_s += dur_s
        self.stats.chunks = self._seq
        self.stats.audio_s = self._audio_out_s
