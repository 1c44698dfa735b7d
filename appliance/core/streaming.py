"""One synthesis request as a stream of chunks: the conductor of the pipeline's stages.

Per clause (a whole sentence, unless it is longer than ``max_sentence_chars``): encode
(:mod:`appliance.core.pipeline.encode`, on a worker: phonemes, encoding, words found; a
request's first clause also its chunk plan and first chunk, or its start strategy's first
audio, :mod:`appliance.core.pipeline.start`) → plan the chunks at word and pause
boundaries (:mod:`appliance.core.chunkplan`) → decode each chunk's frames with
``context`` frames of latent on each side (exact: no crossfade is needed inside a
clause; on a worker) → shape them (:mod:`appliance.core.pipeline.shape`: fades at clause
joins, volume, SSML silence, time-stretch) → place them on the output timeline
(:mod:`appliance.core.pipeline.timeline`: marks, words, stalls) → emit.  The next
clause is encoded while the current one is still being decoded, with a deadline that
says when its audio will be needed.

Threads: :class:`SynthesisJob` runs on the event loop; what runs on a worker is a pure
function of :mod:`.encode` (or a strategy's ``open``) over immutable inputs, submitted
through :meth:`SynthesisJob._submit` and awaited, one item of the job at a time, its
result handed back frozen (:mod:`appliance.core.pipeline.types`).  The loop's state —
the timeline, the time-stretch, the chunk sizes, the clauses encoded ahead
(:mod:`appliance.core.pipeline.ahead`) — is owned by the job and touched only on the loop.

Lifecycle and bounds: a job lives for one request; at most three of its work items exist
at once (the chunk being decoded and the encodes of the next one or two clauses);
cancelling it drops its queued items and stops its running one (the scheduler's
``cancel_owner``).  No encoder call takes more than ``engine.max_phonemes`` ids
(:mod:`appliance.model.engine.bounded`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.core.chunkplan import QUICK_MIN_IDS, chunk_span, mode_plan
from appliance.core.pipeline import eager, encode
from appliance.core.pipeline.ahead import ClausesAhead
from appliance.core.pipeline.clauses import ClauseQueue, Draft
from appliance.core.pipeline.shape import Output, Shaped, joined, shape, stretch_factor
from appliance.core.pipeline.start import choose
from appliance.core.pipeline.timeline import Timeline
from appliance.core.pipeline.types import (
    Emit,
    EncodedClause,
    JobSettings,
    JobStats,
    Place,
    Voiced,
    VoiceRuntime,
)
from appliance.core.visemetimes import VisemeTrack
from appliance.speech import FloatArray

if TYPE_CHECKING:
    from appliance.core.scheduler import Scheduler, WorkTiming
    from appliance.text.frontend import Clause

__all__ = ["ClauseQueue", "JobSettings", "JobStats", "SynthesisJob", "VoiceRuntime"]

KEEPALIVE_S = 0.02
"""A keep-alive chunk's silence (``keepalive_ms``)."""


class SynthesisJob:
    """Produces the chunks of one request, with deadlines, on the shared scheduler: the
    conductor of the stages (see the module); on the event loop only."""

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
        frame_ms = 1000.0 * voice.hop / voice.sample_rate
        self.ctx = encode.EncodeContext(
            voice,
            settings,
            mode_plan(settings.mode, frame_ms),
            frame_ms,
            round(voice.sample_rate * settings.join_fade_ms / 1000.0),
            scheduler.crowded,
            scheduler.beside,
        )
        self._start = choose(self.ctx)
        self._eager = eager.choose(self.ctx)
        stats.text_stream, stats.eager = settings.text_stream, self._eager is not None
        self.output = Output(voice.sample_rate, settings.stretch_speed)
        self.timeline = Timeline(
            voice.sample_rate,
            frame_ms,
            stats,
            self.output,
            settings.watermark_s,
            settings.word_timings,
            voice.phonemizer.is_space,
            VisemeTrack(voice.phonemizer.visemes, voice.phonemizer.kinds)
            if settings.visemes
            else None,
        )
        self._target = self.ctx.plan.first_target
        """The next chunk's size in frames (chunks grow through the request)."""
        self._chars_done = 0
        """Characters of the clauses whose audio is fully written (admission's estimate)."""
        self._clauses_done = 0
        self.ahead = ClausesAhead(
            clauses, self._submit_encode, functools.partial(scheduler.lone, self)
        )
        """The next clauses and their encodes, submitted while this one plays."""

    # -- what the service reads

    def buffer_s(self) -> float:
        """Audio the client holds but has not played yet (if it plays in real time)."""
        return self.timeline.buffer_s()

    def remaining_audio_s(self) -> float | None:
        """Estimate of the audio still to come, from the characters left; None before any."""
        per_char = self._audio_per_char()
        if per_char is None:
            return None
        return max(0.0, (self.clauses.chars_total - self._chars_done) * per_char)

    def _audio_per_char(self) -> float | None:
        """Seconds of audio per character of the clauses done so far; None before any."""
        out_s = self.timeline.audio_out_s
        if out_s <= 0 or self._chars_done <= 0:
            return None
        return out_s / self._chars_done

    def cancel_pending(self) -> int:
        return self.scheduler.cancel_owner(self)

    # -- the stream

    async def run(self, emit: Emit) -> None:
        try:
            await self._run(emit)
        finally:
            # Drops this job's queued items and cancels their futures, which also
            # ends a prefetched encode still waiting in the queue.
            self.cancel_pending()
            self.ahead.cancel()

    async def _run(self, emit: Emit) -> None:
        item = await self._following(emit)
        while item is not None:
            if isinstance(item, Draft):  # a sentence still being written
                assert self._eager is not None
                if (played := await self._eager.play(self, item, emit)) is None:
                    break
                clause, voiced = played
            else:
                clause = item
                encoded = await self._encoded(clause)
                if encoded.opening is not None:
                    assert self._start is not None
                    voiced = await self._start.play(self, clause, encoded, emit)
                else:
                    voiced = self.plan(clause, encoded)
            await self._speak(voiced, emit)
            self._chars_done += len(clause.text)
            self._clauses_done += 1
            item = await self._following(emit)
        if self.output.stretching:
            # A text stream's last chunk was not known as last: the stretcher's tail now.
            tail = self.output.render(Shaped(np.zeros(0, np.float32)), final=True)
            if len(tail):
                await self.timeline.send(tail, Place(self.timeline.last_span, final=True), emit)

    async def _encoded(self, clause: Clause) -> EncodedClause:
        """The clause's encoding: prefetched, or the request's first item (urgent: work
        ahead of time steps aside for it, see the scheduler)."""
        if (fut := self.ahead.take(clause)) is not None:
            return (await fut)[0]  # type: ignore[no-any-return]
        first = self._clauses_done == 0
        if first:
            work = functools.partial(
                encode.encode_first, self.ctx, clause, self._target, self._start
            )
        else:
            work = functools.partial(encode.encode_clause, self.ctx, clause)
        encoded: EncodedClause
        submitted = self._submit(work, "encode", urgent=first)
        if first and self.scheduler.own_cores:
            self.ahead.open(clause)
        encoded, timing = await submitted
        if first:
            self.stats.first_encoded(timing.queue_s, timing.run_s, encoded, self.timeline.words)
            self.voice.costs.observe_first_decode(encoded.first_decode_s)
            if len(encoded.ids) >= QUICK_MIN_IDS:
                # A plain start's prior teaches the estimate too: after one slow whole
                # prior, or stale stored costs, no quick start followed to teach it back.
                self.voice.costs.observe_prior(len(encoded.ids), encoded.prior_s)
        return encoded

    async def _following(self, emit: Emit) -> Clause | Draft | None:
        """The next clause; with an eager start, the draft of a sentence still being
        written once nothing else is left to play; None: the text is over."""
        if (nxt := self.ahead.peek()) is not None:
            return nxt
        q = self.clauses
        if self._eager is None and not self.settings.keepalive_ms:
            if self.settings.text_stream and not q.ready and not q.closed:
                self.timeline.waiting_for_text()  # the writer's sentence is not out yet
            return await q.take()
        while not q.ready:
            if q.closed:
                return None
            left, d = self.buffer_s(), q.draft
            if self._eager is not None:
                q.want_draft(self.timeline.seq == 0 or left < eager.LATER_START_S)
                if q.draft_wanted and d is not None and d.words >= eager.MIN_WORDS:
                    return d
            self.timeline.waiting_for_text()
            later = self._eager is not None and left > eager.LATER_START_S
            await self.idle(left - eager.LATER_START_S + 0.005 if later else None, emit)
        if self._eager is not None:
            q.want_draft(False)  # the text is ahead of the listener: no draft is spoken
        return q.take_nowait()

    # -- what a start strategy uses

    @property
    def joins_in(self) -> bool:
        """A clause was spoken before (the next one's first chunk fades in)."""
        return self._clauses_done > 0

    def waiting_for_text(self) -> None:
        self.timeline.waiting_for_text()

    async def idle(self, timeout: float | None, emit: Emit) -> None:
        """Wait for the clause queue to change (at most ``timeout`` s); once the listener
        has run dry and ``keepalive_ms`` passed without a chunk, send a short silence."""
        ka = self.settings.keepalive_ms / 1000.0
        if ka > 0 and self.timeline.seq > 0:
            now = time.monotonic()
            due = max(self.timeline.sent_at + ka, now + self.buffer_s()) - now
            if due <= 0:
                self.stats.keepalives += 1
                silence = np.zeros(round(KEEPALIVE_S * self.voice.sample_rate), np.float32)
                end = self.timeline.last_span[1]
                await self.send(Shaped(silence), Place((end, end)), emit)
                return
            timeout = due if timeout is None else min(timeout, due)
        await self.clauses.changed(None if timeout is None else max(0.0, timeout))

    def _submit_encode(self, clause: Clause, due_s: float) -> asyncio.Future[Any]:
        """A later clause's encode, due when the listener needs ``due_s`` more audio."""
        return self._submit(
            functools.partial(encode.encode_clause, self.ctx, clause), "encode", due_s
        )

    def plan(self, clause: Clause, encoded: EncodedClause, start: int = 0) -> Voiced:
        """How the clause's frames from ``start`` become output: its chunks (the first
        clause's came planned with its encoding) and where it starts in time."""
        first = self._clauses_done == 0 and start == 0
        speech_ms = self.timeline.next_ms() + clause.pause_before_ms
        voiced, self._target = encode.voice_clause(
            self.ctx, clause, encoded, self._target, first, speech_ms, start
        )
        return voiced

    def grow(self, frames: int) -> None:
        """A chunk of ``frames`` went out: the next may be about twice as long."""
        self._target = min(self.ctx.plan.cap, max(self._target, 2 * frames))

    async def _speak(self, voiced: Voiced, emit: Emit) -> None:
        """Decode, shape and send one clause's chunks."""
        clause, encoded, tl = voiced.clause, voiced.encoded, self.timeline
        if self.output.stretching:
            self.output.set_factor(stretch_factor(self.settings, encoded.enc, clause.speed))
        if voiced.seam == 0:  # a start strategy placed its own
            tl.place_clause_marks(voiced)
            if tl.visemes:
                tl.place_visemes(encoded.ids, tl.id_time(voiced))
            if tl.words:
                tl.place_clause_words(voiced)
        hop, rate = self.voice.hop, self.voice.sample_rate
        clause_audio_s = (voiced.total - voiced.seam) * hop / rate
        clause_out_s = 0.0
        for j, (a, b) in enumerate(voiced.chunks):
            audio = await self._chunk_audio(voiced, j, a, b)
            last = j == len(voiced.chunks) - 1
            if last and tl.pending is not None:  # no work item of its own carried them
                tl.place_pending(tl.pending.work.all())
            more = not self.clauses.exhausted or len(self.ahead) > 0
            shaped = shape(
                voiced,
                audio,
                (a, b),
                first=j == 0,
                join_in=j == 0 and self._clauses_done > 0 and voiced.seam == 0,
                fade_out=last and more,
                fade_n=self.ctx.fade,
                volume=self.settings.volume,
                rate=rate,
            )
            place = Place(
                chunk_span(clause, a, b, voiced.total),
                sentence_end=last and clause.sentence_end,
                final=last and not more,
            )
            await self.send(shaped, place, emit)
            clause_out_s += (b - a) * hop / rate
            self.ahead.fill(clause_audio_s - clause_out_s, tl.seq <= 1, self._audio_per_char())

    async def _chunk_audio(self, voiced: Voiced, j: int, a: int, b: int) -> FloatArray:
        encoded = voiced.encoded
        self.stats.windows += 1
        if j == 0 and encoded.first_audio is not None:
            return encoded.first_audio
        if encoded.enc is None:
            assert encoded.audio is not None
            return encoded.audio
        # The first chunk after a join: one frame more, whose last samples are
        # crossfaded with the provisional audio's.
        lead = voiced.lead if j == 0 else None
        due = self.timeline.pending
        work = functools.partial(
            encode.decode,
            self.ctx,
            encoded.enc,
            a if lead is None else a - 1,
            b,
            due.work if due is not None else None,
        )
        (audio, words), timing = await self._submit(work, "decode")
        self.timeline.place_pending(words)
        if self.timeline.seq == 0:
            self.stats.first_decode_ms = timing.run_s * 1000
        out: FloatArray = audio if lead is None else joined(lead, audio, self.voice.hop)
        return out

    async def send(self, shaped: Shaped, place: Place, emit: Emit) -> None:
        """Render one chunk's samples (the time-stretch) and send it on the timeline."""
        await self.timeline.send(self.output.render(shaped, place.final), place, emit)

    def submit(
        self, fn: Callable[[], Any], kind: str, later_s: float = 0.0
    ) -> asyncio.Future[tuple[Any, WorkTiming]]:
        """Run ``fn`` on a worker for a start strategy, due when the listener runs dry (or
        ``later_s`` after)."""
        return self._submit(fn, kind, later_s)

    def _submit(
        self, fn: Callable[[], Any], kind: str, ahead_s: float = 0.0, urgent: bool = False
    ) -> asyncio.Future[tuple[Any, WorkTiming]]:
        """Run ``fn`` on the scheduler, due when the listener needs ``ahead_s`` more audio
        than it has; the future's result is counted in the stats when it is awaited."""
        fut = self.scheduler.submit(
            fn,
            deadline=self.timeline.due(ahead_s),
            realtime=self.settings.realtime,
            owner=self,
            kind=kind,
            urgent=urgent,
            slack_until=self.timeline.slack_until(ahead_s),
        )
        return asyncio.ensure_future(self._counted(fut))

    async def _counted(self, fut: Awaitable[tuple[Any, WorkTiming]]) -> tuple[Any, WorkTiming]:
        result, timing = await fut
        self.stats.compute_s += timing.run_s
        self.stats.queue_s += timing.queue_s
        return result, timing
