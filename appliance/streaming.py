"""One synthesis request as a stream of chunks: chunk plan, windowed decode, output format.

Per clause: phonemize + encode (one work item) → plan chunks at word and
pause boundaries from the durations → decode each chunk's frames with
``context`` frames of latent on each side and trim (exact: no crossfade is
needed inside a clause) → volume, resample, format → emit.  The next clause
is encoded while the current one is still being decoded, with a deadline
that says when its audio will be needed.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.engine.base import Encoded, FloatArray, IntArray, Scales, VoiceModel
from appliance.engine.windows import decode_span
from appliance.speech import Chunk, Mark

if TYPE_CHECKING:
    from appliance.frontend import Clause
    from appliance.phonemize import Phonemizer
    from appliance.scheduler import Scheduler, WorkTiming


STALL_JITTER_S = 0.1
"""A stall is counted when a chunk arrives after a client playing in real time from its
first chunk, with this much jitter buffer, would have run dry (the benchmark's client)."""

NEWCOMER_GRACE_S = STALL_JITTER_S / 2
"""How far past the moment a buffer-less player would run dry a stream's work may start
when newcomers' first items go ahead of it: half the jitter buffer, leaving the other
half for the work itself (the scheduler's ``slack_until``)."""

# ------------------------------------------------------------------ pure helpers


@dataclass(frozen=True)
class ModePlan:
    """Chunk sizes in frames: the first chunk's bounds and the growth cap."""

    first_min: int
    first_target: int
    first_max: int
    cap: int
    whole: bool = False


def mode_plan(mode: str, frame_ms: float) -> ModePlan:
    def f(ms: float) -> int:
        return max(1, round(ms / frame_ms))

    if mode == "reading":
        return ModePlan(f(120), f(300), f(400), f(1200))
    if mode == "sentence":
        return ModePlan(1, 1, 1, 1, whole=True)
    # dialog: the first chunk is small so the first sound comes quickly; each
    # next chunk about doubles, so the client's buffer grows faster than it drains.
    return ModePlan(f(90), f(95), f(190), f(800))


def plan_chunks(
    durations: FloatArray,
    boundary: list[bool],
    plan: ModePlan,
    target: int,
    first: bool,
) -> tuple[list[tuple[int, int]], int]:
    """Frame ranges for one clause; returns them and the next target size.

    Cuts go at word and pause boundaries (the end of a space or punctuation
    id) closest to the target size within bounds; anywhere is exact, the
    boundaries just keep ``text_span`` honest and chunks whole words.
    """
    ends = np.cumsum(durations).astype(np.int64)
    total = int(ends[-1]) if len(ends) else 0
    if plan.whole or total == 0:
        return ([(0, total)] if total else []), target
    cuts = sorted({int(e) for e, is_b in zip(ends, boundary, strict=False) if is_b})
    chunks: list[tuple[int, int]] = []
    a = 0
    while a < total:
        if first and not chunks:
            lo, tgt, hi = plan.first_min, plan.first_target, plan.first_max
        else:
            lo, tgt, hi = max(1, target // 2), target, max(target, round(target * 1.5))
        if total - a <= hi:
            b = total
        else:
            near = [c for c in cuts if a + lo <= c <= a + hi]
            b = min(near, key=lambda c: abs(c - (a + tgt))) if near else a + tgt
            if total - b < max(1, lo // 2):
                b = total
        chunks.append((a, b))
        target = min(plan.cap, max(target, 2 * (b - a)))
        a = b
    return chunks, target


_WORD = re.compile(r"\S+")


def mark_frames(
    clause: Clause, ids: IntArray, durations: FloatArray | None, is_space: Callable[[int], bool]
) -> list[tuple[str, float]]:
    """Where each of a clause's marks falls in its audio: ``(name, frame)``.

    A mark before the clause's word *w* is placed where the voice starts that word: after
    the *w*-th word gap (space id) in the durations.  espeak may count words differently
    from the text (a "twenty-six" is one word, a lone dash none), so *w* is scaled to
    espeak's count; the result is within a word of the boundary, inside one window.
    Without durations (whole-clause voices) the position is proportional to characters.
    """
    if not clause.marks:
        return []
    starts = [m.start() for m in _WORD.finditer(clause.text)]
    if durations is None:
        n = max(1, len(clause.text))
        return [(m.name, m.position / n) for m in clause.marks]  # a fraction of the clause
    cum = np.concatenate([[0.0], np.cumsum(durations, dtype=np.float64)])
    total = float(cum[-1])
    gaps = [k for k, i in enumerate(ids.tolist()) if is_space(int(i))]
    out: list[tuple[str, float]] = []
    for m in clause.marks:
        w = sum(1 for a in starts if a < m.position)
        if w >= len(starts):  # after the last word begins: the end of the clause
            out.append((m.name, total))
            continue
        if w == 0:
            out.append((m.name, 0.0))
            continue
        if len(gaps) + 1 != len(starts):
            w = min(len(gaps), max(1, round(w * (len(gaps) + 1) / len(starts))))
        out.append((m.name, float(cum[gaps[w - 1] + 1])))
    return out


def silence(ms: int, rate: int) -> FloatArray:
    return np.zeros(round(ms * rate / 1000), dtype=np.float32)


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


# ------------------------------------------------------------------ the job


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


@dataclass
class JobStats:
    t_request: float
    t_first: float | None = None
    frontend_ms: float = 0.0
    first_queue_ms: float = 0.0
    first_encode_ms: float = 0.0
    first_decode_ms: float = 0.0
    first_write_ms: float = 0.0
    compute_s: float = 0.0
    queue_s: float = 0.0
    audio_s: float = 0.0
    chunks: int = 0
    stalls: int = 0
    windows: int = 0
    parts: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        ttfp = (self.t_first - self.t_request) * 1000 if self.t_first is not None else None
        return {
            "ttfp_ms": round(ttfp, 2) if ttfp is not None else None,
            "audio_ms": round(self.audio_s * 1000, 1),
            "compute_ms": round(self.compute_s * 1000, 2),
            "queue_ms": round(self.queue_s * 1000, 2),
            "rtf": round(self.compute_s / self.audio_s, 4) if self.audio_s > 0 else None,
            "chunks": self.chunks,
            "stalls": self.stalls,
            "ttfp_parts_ms": {
                "frontend": round(self.frontend_ms, 2),
                "queue": round(self.first_queue_ms, 2),
                "encode": round(self.first_encode_ms, 2),
                "first_decode": round(self.first_decode_ms, 2),
                "write": round(self.first_write_ms, 2),
            },
        }


Emit = Callable[[Chunk], Awaitable[None]]
"""Hands one chunk to its front end (which applies back-pressure by taking its time)."""


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
        self._plan = mode_plan(settings.mode, 1000.0 * voice.hop / voice.sample_rate)
        self._audio_out_s = 0.0
        self._fade = round(voice.sample_rate * settings.join_fade_ms / 1000.0)
        self._chars_done = 0
        """Characters of the clauses whose audio is fully written (admission's estimate)."""
        self._marks: collections.deque[Mark] = collections.deque()
        """SSML marks placed in the audio but not yet sent with a chunk, in order."""

    def _take_marks(self, end_ms: float, everything: bool) -> tuple[Mark, ...]:
        """The marks that fall before ``end_ms`` (all of them for the request's last chunk)."""
        out: list[Mark] = []
        # A mark on a chunk boundary belongs to the chunk that starts there (the two
        # numbers come from frames through different float paths: allow a microsecond).
        while self._marks and (everything or self._marks[0].offset_ms < end_ms - 1e-3):
            out.append(self._marks.popleft())
        return tuple(out)

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

    async def _submit(
        self, fn: Callable[[], Any], kind: str, ahead_s: float = 0.0, urgent: bool = False
    ) -> tuple[Any, WorkTiming]:
        """Run ``fn`` on the scheduler, due when the listener needs ``ahead_s`` more audio
        than it has."""
        fut = self.scheduler.submit(
            fn,
            deadline=self._due(ahead_s),
            realtime=self.settings.realtime,
            owner=self,
            kind=kind,
            urgent=urgent,
            slack_until=self._slack_until(ahead_s),
        )
        result, timing = await fut
        self.stats.compute_s += timing.run_s
        self.stats.queue_s += timing.queue_s
        return result, timing

    def cancel_pending(self) -> int:
        return self.scheduler.cancel_owner(self)

    # -- work items (run on worker threads)

    def _encode(self, clause: Clause, first_target: int | None = None) -> _Encoded:
        """Phonemize and encode a clause; with ``first_target``, also plan it and decode
        its first chunk (the first clause of a request)."""
        ph = self.voice.phonemizer
        if clause.phonemes:  # SSML <phoneme>, lexicon IPA entries
            ids = ph.ids_for(ph.phonemes_with(clause.text, clause.phonemes))
        else:
            ids = ph.ids(clause.text)
        s = self.settings
        scales = s.scales
        if clause.speed != 1.0:  # SSML <prosody rate>
            scales = self._rate_scales(ids, clause.speed)
        if not self.voice.can_stream:
            return _Encoded(ids, None, self.voice.model.fused(ids, scales, s.speaker))
        model = self.voice.model
        if first_target is None:
            return _Encoded(ids, model.encode(ids, scales, s.speaker), None)
        # The first clause: the flow runs over the first chunk's frames only (in
        # decode_span); the rest of it comes with the second chunk.
        enc = model.encode_prior(ids, scales, s.speaker)
        out = _Encoded(ids, enc, None)
        out.chunks, out.target = self._plan_clause(out, first_target, first=True)
        if out.chunks:
            t0 = time.monotonic()
            a, b = out.chunks[0]
            # A first chunk of a streaming plan is what a real-time listener waits for:
            # the backend's fastest decoder, if the cores it spreads over are free.  In a
            # burst, and for a whole-sentence chunk (mode sentence, what Piper does) or a
            # batch request, the cheapest (appliance.conv2d): 16 vs 21 ms of CPU.
            urgent = s.realtime and not self._plan.whole and not self.scheduler.crowded()
            out.first_audio = decode_span(model, enc, a, b, s.context, self.voice.hop, urgent)
            out.first_decode_s = time.monotonic() - t0
        return out

    def _decode(self, enc: Encoded, a: int, b: int) -> FloatArray:
        """A later chunk's frames; decoded ahead only while no other work waits: in a
        burst of newcomers, a second chunk that ran the rest of its clause's flow and
        decoded 4× its frames took ~50 ms, and the last streams' second chunks came
        after their listeners had run dry."""
        ahead = not self.scheduler.crowded()
        return decode_span(
            self.voice.model, enc, a, b, self.settings.context, self.voice.hop, ahead=ahead
        )

    def _rate_scales(self, ids: IntArray, speed: float) -> Scales:
        """Scales that make a clause ``speed`` times as fast (SSML ``<prosody rate>``).

        Dividing ``length_scale`` by the factor is not enough: the voice rounds every
        phoneme's duration *up* to whole frames, so short phonemes barely stretch (rate
        x-slow gave 1.72× the length, not 2×).  One durations-only pass at the request's
        scale calibrates it: frames(L) ≈ D·L + n/2 for n phonemes (the ceiling adds half a
        frame each on average), solved for the target length.  Whole-clause voices get
        the plain division.
        """
        s = self.settings.scales
        naive = dataclasses.replace(s, length_scale=s.length_scale / speed)
        if not self.voice.can_stream:
            return naive
        base = self.voice.model.encode_prior(ids, s, self.settings.speaker).durations
        n = float(np.count_nonzero(base))
        frames = float(base.sum())
        per_scale = (frames - n / 2) / s.length_scale
        if per_scale <= 0:
            return naive
        scale = (frames / speed - n / 2) / per_scale
        return dataclasses.replace(s, length_scale=max(0.1 * naive.length_scale, scale))

    def _plan_clause(
        self, encoded: _Encoded, target: int, first: bool
    ) -> tuple[list[tuple[int, int]], int]:
        assert encoded.enc is not None
        boundary = [self.voice.phonemizer.is_boundary(int(i)) for i in encoded.ids]
        return plan_chunks(encoded.enc.durations, boundary, self._plan, target, first=first)

    # -- the stream

    async def run(self, emit: Emit) -> None:
        try:
            await self._run(emit)
        finally:
            # Drops this job's queued items and cancels their futures, which also
            # ends a prefetched encode still waiting in the queue.
            self.cancel_pending()

    async def _run(self, emit: Emit) -> None:
        hop = self.voice.hop
        rate = self.voice.sample_rate
        target = self._plan.first_target
        pending: asyncio.Future[Any] | None = None
        seq = 0
        k = 0
        clause = await self.clauses.take()
        while clause is not None:
            if pending is None:
                work = functools.partial(self._encode, clause, target if k == 0 else None)
                # The first item is what the listener waits for: work ahead of time
                # steps aside for it (see the scheduler).
                pending = asyncio.ensure_future(self._submit(work, "encode", urgent=k == 0))
            encoded, timing = await pending
            pending = None
            nxt: Clause | None = None
            if k == 0:
                self.stats.first_queue_ms = timing.queue_s * 1000
                self.stats.first_encode_ms = (timing.run_s - encoded.first_decode_s) * 1000
                self.stats.first_decode_ms = encoded.first_decode_s * 1000
            if encoded.enc is not None:
                if encoded.chunks is not None:
                    chunks, target = encoded.chunks, encoded.target
                else:
                    chunks, target = self._plan_clause(encoded, target, first=k == 0)
                total = encoded.enc.frames
            else:
                assert encoded.audio is not None
                total = len(encoded.audio) // hop
                chunks = [(0, total)] if len(encoded.audio) else []
            clause_audio_s = total * hop / rate
            clause_out_s = 0.0
            # SSML: silence around the clause, its volume, and where its marks fall.
            pre = silence(clause.pause_before_ms, rate) if clause.pause_before_ms else None
            post = silence(clause.pause_after_ms, rate) if clause.pause_after_ms else None
            speech_start_ms = (
                self._audio_out_s + (len(pre) if pre is not None else 0) / rate
            ) * 1000
            if clause.marks:
                enc_ = encoded.enc
                frames = mark_frames(
                    clause,
                    encoded.ids,
                    enc_.durations if enc_ is not None else None,
                    self.voice.phonemizer.is_space,
                )
                frame_ms = 1000.0 * hop / rate
                for name, at in frames:
                    at_ms = at * total * frame_ms if enc_ is None else at * frame_ms
                    self._marks.append(Mark(name, speech_start_ms + at_ms))
            for j, (a, b) in enumerate(chunks):
                if j == 0 and encoded.first_audio is not None:
                    audio = encoded.first_audio
                    self.stats.windows += 1
                elif encoded.enc is not None:
                    enc = encoded.enc
                    audio, timing = await self._submit(
                        functools.partial(self._decode, enc, a, b), "decode"
                    )
                    self.stats.windows += 1
                    if seq == 0:
                        self.stats.first_decode_ms = timing.run_s * 1000
                else:
                    assert encoded.audio is not None
                    audio = encoded.audio
                first_of_clause, last_of_clause = j == 0, j == len(chunks) - 1
                more = not self.clauses.exhausted or nxt is not None
                audio = fade(
                    audio,
                    self._fade if first_of_clause and k > 0 else 0,
                    self._fade if last_of_clause and more else 0,
                )
                gain = self.settings.volume * clause.volume
                if gain != 1.0:
                    audio = audio * np.float32(gain)
                if first_of_clause and pre is not None:
                    audio = np.concatenate([pre, audio])
                if last_of_clause and post is not None:
                    audio = np.concatenate([audio, post])
                now = time.monotonic()
                run_dry = (self.stats.t_first or now) + self._audio_out_s + STALL_JITTER_S
                if self.stats.t_first is not None and now > run_dry:
                    # A player with a minimal jitter buffer ran out of audio before this chunk.
                    self.stats.stalls += 1
                dur_s = len(audio) / rate
                final = last_of_clause and not more
                end_ms = (self._audio_out_s + dur_s) * 1000
                marks = self._take_marks(end_ms, everything=final)
                chunk = Chunk(
                    seq=seq,
                    samples=audio,
                    sample_rate=rate,
                    offset_ms=self._audio_out_s * 1000,
                    duration_ms=dur_s * 1000,
                    text_span=_chunk_span(clause, a, b, total),
                    sentence_end=last_of_clause and clause.sentence_end,
                    final=final,
                    marks=marks,
                )
                t_w = time.monotonic()
                await emit(chunk)
                if seq == 0:
                    self.stats.t_first = t_w
                    self.stats.first_write_ms = (time.monotonic() - t_w) * 1000
                clause_out_s += dur_s
                if nxt is None and (nxt := self.clauses.take_nowait()) is not None:
                    # Encode the next clause now, due when this clause's audio runs out.
                    # Only after this clause's first chunk is out: submitted earlier, it
                    # would take a free worker from the window the listener waits for.
                    # (Text that streams in may bring it later, after any chunk.)
                    pending = asyncio.ensure_future(
                        self._submit(
                            functools.partial(self._encode, nxt),
                            "encode",
                            clause_audio_s - clause_out_s,
                        )
                    )
                seq += 1
                self._audio_out_s += dur_s
                self.stats.chunks = seq
                self.stats.audio_s = self._audio_out_s
            self._chars_done += len(clause.text)
            k += 1
            clause = nxt if nxt is not None else await self.clauses.take()
        if pending is not None:
            pending.cancel()


def _chunk_span(clause: Clause, a: int, b: int, total: int) -> tuple[int, int]:
    """Original-text span of frames [a, b) of a clause: whole words, by position."""
    words = clause.word_spans
    if not words or total <= 0:
        return clause.span
    n = len(words)
    i = min(n - 1, math.floor(a / total * n))
    j = max(i + 1, min(n, math.ceil(b / total * n)))
    return (words[i][0], words[j - 1][1])
