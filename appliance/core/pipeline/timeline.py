"""The output timeline: the one owner of a request's output time.

What went out (ms sent, the next chunk's sequence number), where the next speech
starts (after what was sent and what the time-stretch still holds), the SSML marks and
words placed in the audio but not yet sent, the stalls a listener would have heard,
and the deadlines that follow from all of it; :meth:`Timeline.send` turns a chunk's
samples into a :class:`~appliance.speech.Chunk` with the marks and words that fall in it.

Word timing, on the loop, lives here: a clause's words are placed at output times from
their id positions (:meth:`Timeline.id_time`: frames, pauses and the stretch are in
that mapping), those a first clause found after its first chunk (:class:`PendingWords`)
when its next chunk's item brings them.  Which ids say which written word is found on
the worker (:mod:`.encode`, :mod:`appliance.core.wordtimes`); how a join splits a
clause's words is the start strategy's (:mod:`.start`).

Thread: the event loop only; one timeline per job, made with it.  Bounds: the marks and
words held are those of the clause being spoken (and of a quick start's, the join's two
encodings), each sent with the chunk it falls in and dropped with it; the final chunk
takes all that are left.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance.core import wordtimes
from appliance.core.chunkplan import IdTest, pause_frames, position_frames
from appliance.core.pipeline.types import (
    Emit,
    JobStats,
    PendingWords,
    Place,
    Voiced,
    WordKeep,
)
from appliance.core.visemetimes import VisemeTrack
from appliance.speech import Chunk, FloatArray, IntArray, Mark, Viseme, Word

if TYPE_CHECKING:
    from appliance.core.pipeline.shape import Output
    from appliance.text.frontend import ClauseMark, ClausePause

STALL_JITTER_S = 0.1
"""A stall is counted when a chunk arrives after a client playing in real time from its
first chunk, with this much jitter buffer, would have run dry (the benchmark's client)."""


@dataclass(eq=False)
class Timeline:
    """One request's output time, marks and words (see the module)."""

    rate: int
    frame_ms: float
    stats: JobStats
    output: Output
    watermark_s: float
    word_timings: bool
    """Chunks carry word timings."""
    is_space: IdTest
    viseme_track: VisemeTrack | None = None
    """Chunks carry this track's visemes."""
    seq: int = field(default=0, init=False)
    """The next chunk's sequence number (chunks sent so far)."""
    audio_out_s: float = field(default=0.0, init=False)
    """Seconds of audio sent."""
    last_span: tuple[int, int] = field(default=(0, 0), init=False)
    _marks: collections.deque[Mark] = field(default_factory=collections.deque, init=False)
    """SSML marks placed in the audio but not yet sent with a chunk, in order."""
    _words: collections.deque[Word] | None = field(default=None, init=False)
    """With word timings: words placed in the audio but not yet sent, in order."""
    pending: PendingWords | None = field(default=None, init=False)
    """The clause's words still to find and place, with its next chunk decoded."""
    dry_s: float = field(default=0.0, init=False)
    """Time the listener waited for text with nothing to play (an eager start's
    waits): its player resumed with the next chunk, so later chunks are due that
    much later."""
    _text_wait: bool = field(default=False, init=False)
    sent_at: float = field(default=0.0, init=False)
    """When the last chunk went out (monotonic)."""

    def __post_init__(self) -> None:
        if self.word_timings:
            self._words = collections.deque()

    @property
    def words(self) -> bool:
        """Word timings were asked."""
        return self._words is not None

    @property
    def visemes(self) -> bool:
        """Visemes were asked."""
        return self.viseme_track is not None

    def next_ms(self) -> float:
        """Where the next speech starts in the output: after what was sent and what the
        time-stretch still holds of the speech before (libsonic keeps ~20 ms across
        chunks; words placed from the sent audio alone came that much early)."""
        return (self.audio_out_s + self.output.held_s) * 1000

    def out_frame_ms(self) -> float:
        """A frame's ms in the output: a stretched clause (speed past the voice's limit) is
        that much shorter."""
        return self.frame_ms / self.output.factor

    def _origin(self) -> float | None:
        """When a real-time listener started playing, shifted by its waits for text."""
        t_first = self.stats.t_first
        return None if t_first is None else t_first + self.dry_s

    def waiting_for_text(self) -> None:
        """The audio waits for text: the next chunk, if it comes after the listener ran
        dry, ends a text wait (counted in ``text_waits``), not a stall."""
        self._text_wait = True

    # -- deadlines

    def due(self, ahead_s: float = 0.0) -> float:
        """When the client will need audio beyond what it has (+ ``ahead_s`` more); before
        the first chunk, as if it started playing now."""
        origin = self._origin()
        if origin is None:
            return time.monotonic() + max(0.0, ahead_s - self.watermark_s)
        return origin + self.audio_out_s + ahead_s - self.watermark_s

    def slack_until(self, ahead_s: float = 0.0) -> float | None:
        """The latest finish for work a listener playing since its first chunk still gets
        in time: when its jitter buffer runs dry (None before the first chunk: nothing is
        playing, nothing can wait).  The scheduler takes the work's own run off it."""
        origin = self._origin()
        if origin is None:
            return None
        return origin + self.audio_out_s + ahead_s + STALL_JITTER_S

    def buffer_s(self) -> float:
        """Audio the client holds but has not played yet (if it plays in real time)."""
        origin = self._origin()
        if origin is None:
            return 0.0
        return max(0.0, origin + self.audio_out_s - time.monotonic())

    # -- marks

    def place_marks(self, marks: Iterable[Mark]) -> None:
        self._marks.extend(marks)

    def place_clause_marks(self, voiced: Voiced, skip: int = 0) -> None:
        """Queue the clause's SSML marks (all but the first ``skip``) at their output times."""
        clause, ids, enc = voiced.clause, voiced.encoded.ids, voiced.encoded.enc
        marks = clause.marks[skip:]
        if not marks:
            return
        if enc is None:  # a whole-clause voice: in proportion to the characters
            n = max(1, len(clause.text))
            frames = [m.position / n * voiced.total for m in marks]
        else:
            positions = [m.position for m in marks]
            frames = position_frames(clause, positions, ids, enc.durations, self.is_space)
        durations = enc.durations if enc is not None else None
        pauses = pause_frames(clause, ids, durations, self.is_space)
        by_frame = {round(f): p for f, p in zip(pauses, clause.pauses, strict=True)}
        frame_ms = self.out_frame_ms()
        for mark, f in zip(marks, frames, strict=True):
            pause = by_frame.get(round(f))

            def after(_: int, mark: ClauseMark = mark, pause: ClausePause | None = pause) -> bool:
                return pause is not None and pause.source_offset < mark.source_offset

            self._marks.append(Mark(mark.name, voiced.at_ms(f, frame_ms, after)))

    # -- words

    def id_time(self, voiced: Voiced) -> wordtimes.IdTime:
        """Output ms of an id position of the clause (see :data:`wordtimes.IdTime`)."""
        fm = self.out_frame_ms()
        enc = voiced.encoded.enc
        if enc is None:  # a whole-clause voice: in proportion to the ids
            n = max(1, len(voiced.encoded.ids))
            return lambda p, after: voiced.at_ms(p / n * voiced.total, fm, lambda _: after)
        cum = wordtimes.FrameSums(enc.durations)
        return lambda p, after: voiced.at_ms(cum[p], fm, lambda _: after)

    def place_words(
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
        stats = self.stats
        if stats.t_first is None and stats.first_words_ms is not None:
            stats.first_words_ms += (time.perf_counter() - t0) * 1000
        return timed[-1].offset_ms + timed[-1].duration_ms if timed else 0.0

    def place_visemes(
        self, ids: IntArray, at: wordtimes.IdTime, keep: WordKeep | None = None
    ) -> None:
        """With visemes, the shapes of the clause's spoken words (``ids``: the clause's;
        those ``keep`` takes) at their output times (``at``, as its words')."""
        if self.viseme_track is not None:
            self.viseme_track.place(ids, at, keep)

    def place_clause_words(self, voiced: Voiced) -> None:
        """Queue the clause's words; those a first clause found after its first chunk are
        placed when they are (:meth:`place_pending`)."""
        encoded, at = voiced.encoded, self.id_time(voiced)
        self.place_words(encoded.written, at)
        self.pending = None
        if encoded.words_left is None:
            return
        placed = encoded.written[-1].start if encoded.written else -1

        def unplaced(w: wordtimes.WrittenWord) -> bool:
            return w.start > placed  # written words start in order, none at the same id

        self.pending = PendingWords(encoded.words_left, at, unplaced)

    def place_pending(self, words: list[wordtimes.WrittenWord] | None) -> None:
        """The pending words, found (None: the item that carried them found none)."""
        due = self.pending
        if due is not None and words is not None:
            self.place_words(words, due.at, due.keep)
            self.pending = None

    # -- chunks

    async def send(self, audio: FloatArray, place: Place, emit: Emit) -> None:
        """Count a stall if the listener ran dry, attach the marks and words that fall in
        the chunk, emit it."""
        stats = self.stats
        self.last_span = place.span
        final = place.final
        now = time.monotonic()
        origin = self._origin()
        if self._text_wait and origin is not None:
            self._text_wait = False
            dry = now - (origin + self.audio_out_s)
            if dry > 0:  # the listener waited for the writer: it resumes with this chunk
                self.dry_s += dry
                origin += dry
                stats.text_waits += 1
                stats.text_wait_ms += dry * 1000
        run_dry = (origin or now) + self.audio_out_s + STALL_JITTER_S
        if origin is not None and now > run_dry:
            # A player with a minimal jitter buffer ran out of audio before this chunk.
            stats.stalls += 1
        dur_s = len(audio) / self.rate
        end_ms = (self.audio_out_s + dur_s) * 1000
        visemes = self._take_visemes(end_ms, final)
        chunk = Chunk(
            seq=self.seq,
            samples=audio,
            sample_rate=self.rate,
            offset_ms=self.audio_out_s * 1000,
            duration_ms=dur_s * 1000,
            text_span=place.span,
            sentence_end=place.sentence_end,
            final=final,
            marks=self._take_marks(end_ms, everything=final),
            words=self._take_words(end_ms, everything=final),
            visemes=visemes,
        )
        t_w = self.sent_at = time.monotonic()
        await emit(chunk)
        if self.seq == 0:
            stats.t_first = t_w
            stats.first_write_ms = (time.monotonic() - t_w) * 1000
        self.seq += 1
        self.audio_out_s += dur_s
        stats.chunks = self.seq
        stats.audio_s = self.audio_out_s

    def _take_visemes(self, end_ms: float, final: bool) -> tuple[Viseme, ...] | None:
        """The chunk's visemes (None: not asked); the first chunk's work is counted."""
        if self.viseme_track is None:
            return None
        t0 = time.perf_counter()
        out = self.viseme_track.take(self.audio_out_s * 1000, end_ms, final)
        if self.seq == 0:
            self.stats.first_visemes_ms = (time.perf_counter() - t0) * 1000
        return out

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
        edge = end_ms - self.frame_ms / 2
        while self._words and (everything or self._words[0].offset_ms < edge):
            out.append(self._words.popleft())
        return tuple(out)
