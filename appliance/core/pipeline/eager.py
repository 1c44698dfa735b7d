"""The eager start: a sentence spoken while it is still being written (issue 44).

Text that streams in at a language model's pace used to wait for its sentence's end: every
sentence was encoded whole.  With ``text_start: eager`` the job speaks a sentence from its
*draft* (:class:`~appliance.core.pipeline.clauses.Draft`: the frontend's reading of the
text known so far), prefix to prefix (Ma et al., EMNLP Findings 2020):

- a draft's encoding (a :class:`Take`) is played only up to the word gap before its last
  written word: at least one word of lookahead, and the last word may still be growing;
  it is encoded followed by a few words of :data:`SEQUELS` (never played), so that the
  voice reads the draft as a sentence that goes on, not as a short sentence's slow end;
- as words arrive, a longer draft is encoded and takes over at a word gap ahead of the
  playhead: the gap that has the same written words before it in both encodings (so a
  word espeak merges with the next, or a number read as several words, is never cut or
  said twice); a crossfade of the join fade hides the seam.  Only the encodings the
  playhead will reach are made: a longer draft is encoded once less than
  :data:`REENCODE_LEFT_S` of audio is left (held by the listener and playable in the
  current encoding) and it has grown by :data:`MIN_GROWTH` words, or once less than
  :data:`URGENT_LEFT_S` is left; the text stream drafts only when the job would encode a
  draft (:meth:`~appliance.core.pipeline.clauses.ClauseQueue.want_draft`);
- when the sentence's clause arrives (its segment released), the whole clause's encoding
  takes over at the next word gap (:func:`~appliance.core.pipeline.start.take_over`), so
  from there on the audio is piper's whole-sentence rendering;
- provisional audio goes out only while the listener holds less than
  :data:`EAGER_AHEAD_S`: the sooner the whole sentence can take over.  A writer that
  stops mid-sentence leaves the audio waiting at a word gap (``text_waits``, faded out if
  the listener runs dry), and it goes on when text comes.

Threads: :func:`take_draft`, :func:`take_whole` and :func:`decode_provisional` are the
worker halves, pure functions over frozen inputs (each one work item); :class:`EagerStart`
and :class:`_Sentence` run on the loop, through the job (:class:`EagerHost`).

Bounds and lifecycle: one :class:`_Sentence` per sentence started from a draft, with at
most one encoding and one decode of it in flight; a draft is one clause of at most the
release rule's ``max_chars``; everything it makes belongs to that sentence and is dropped
when the whole clause has taken over (or the request ends).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from appliance.core.pipeline import encode
from appliance.core.pipeline.shape import Shaped, fade, gain, joined, silence_samples
from appliance.core.pipeline.start import Heard, JoinWords, StartHost, take_over
from appliance.core.pipeline.types import Emit, EncodedClause, Place, Provisional, Voiced
from appliance.model.engine.windows import decode_span

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from appliance.core import wordtimes
    from appliance.core.pipeline.clauses import ClauseQueue, Draft
    from appliance.core.pipeline.encode import EncodeContext
    from appliance.model.engine.base import Encoded
    from appliance.speech import FloatArray, IntArray
    from appliance.text.frontend import Clause

EAGER_AHEAD_S = 0.3
"""Provisional audio is sent only while the listener holds less than this."""
REENCODE_LEFT_S = 0.6
"""A longer draft is encoded once less than this much audio is left to play (held by the
listener and playable in the current encoding) and it has :data:`MIN_GROWTH` more words."""
URGENT_LEFT_S = 0.3
"""... or once less than this is left, whatever it has grown by."""
MIN_GROWTH = 2
"""Words a draft has grown by for an encoding while more than :data:`URGENT_LEFT_S` is left:
a draft one word longer, with text still coming fast, was often made and never played."""
LATER_START_S = 0.3
"""A later sentence starts from its draft once the listener holds less than this."""
CHUNK_MS = 230.0
"""Provisional chunks: the first as short as the plan's first, then about this long."""
WHOLE_WAIT_S = 0.1
"""Once the sentence is complete, provisional audio goes out only while the listener holds
less than this: the whole sentence's encoding takes over at the next gap."""
DRY_S = 0.02
"""A provisional chunk's held-back samples go out (faded) this close to the listener
running dry for want of text."""
MIN_WORDS = 2
"""A draft is spoken from once it has this many written words (one to play, one ahead)."""


def choose(ctx: EncodeContext) -> EagerStart | None:
    """The eager start where it applies: asked for (``text_start: eager``), a listener
    waits, chunks are cut within sentences, the audio need not be the same every time
    and no time-stretch runs (its held samples would straddle a join)."""
    s = ctx.settings
    ok = s.eager and s.realtime and not s.deterministic and not ctx.plan.whole
    return EagerStart() if ok and s.stretch_speed is None and ctx.voice.can_stream else None


@dataclass(frozen=True)
class Take:
    """One encoding of a sentence (a draft's or its whole clause's) and its word gaps
    where another encoding may join it."""

    clause: Clause
    version: int
    """Its draft's version; 0: the whole clause."""
    ids: IntArray
    enc: Encoded
    seams: tuple[int, ...]
    """Id positions of its joinable word gaps (a word's first phoneme: no written word
    straddles it), ascending."""
    frames: tuple[int, ...]
    """The frame of each seam."""
    keys: tuple[int, ...]
    """Where each seam is in the text as sent: the end of the written word before it."""
    playable: int
    """Seams it may be played up to: those before its last written word (all: whole)."""
    written: list[wordtimes.WrittenWord]
    first: FloatArray | None = None
    """An opening's first chunk (frames [0, ``frames[first_to]``))."""
    first_to: int = -1
    decode_s: float = 0.0

    @property
    def final(self) -> bool:
        return self.version == 0

    def index(self, key: int) -> int | None:
        """The seam at text position ``key`` (-1: the sentence's start); None: none."""
        if key < 0:
            return -1
        try:
            return self.keys.index(key)
        except ValueError:
            return None


# ------------------------------------------------------------------ worker halves


def take_draft(ctx: EncodeContext, draft: Draft, opening: bool) -> Take | None:
    """A draft's encoding (an opening's also decodes its first chunk); None: no word of it
    may be played yet (a word ahead is not known, or espeak's words could not be placed)."""
    take = _take(ctx, draft.clause, draft.version)
    if take is None or take.playable == 0 or not opening:
        return take
    to = next_seam(take, -1, ctx.plan.first_min, ctx.frame_ms)
    t0 = time.monotonic()
    audio = decode_provisional(ctx, take.enc, 0, take.frames[to], encode.urgent_decode(ctx))
    decode_s = time.monotonic() - t0
    return dataclasses.replace(take, first=audio, first_to=to, decode_s=decode_s)


def take_whole(ctx: EncodeContext, clause: Clause) -> Take:
    """The whole clause's encoding (its prior; the flow runs window by window)."""
    take = _take(ctx, clause, 0)
    assert take is not None
    return take


def decode_provisional(
    ctx: EncodeContext, enc: Encoded, a: int, b: int, urgent: bool = False
) -> FloatArray:
    """Frames [a, b) of a draft's encoding: nothing decoded ahead (the frames past the
    gap are the next encoding's), the flow from ``a`` on only."""
    skip_latent(enc, a, ctx.settings.context)
    s, v = ctx.settings, ctx.voice
    return decode_span(v.model, enc, a, b, s.context, v.hop, urgent, ahead=False)


def skip_latent(enc: Encoded, a: int, context: int) -> None:
    """An encoding first decoded from frame ``a`` runs its flow from there (with its own
    context), not from frame 0: a take joins mid-sentence."""
    if enc.ready == 0 and enc.z_p is not None:
        enc.ready = max(0, a - context)


def _take(ctx: EncodeContext, clause: Clause, version: int) -> Take | None:
    ids = encode.clause_ids(ctx, clause)
    sequel = _sequel(ctx) if version else None
    if sequel is None or len(ids) + len(sequel) > ctx.settings.max_phonemes:
        ids, enc = encode.bounded(ctx, ids, ctx.settings.scales, prior=True)
    else:  # the draft's own ids come first: its seams and words are read from them
        joint = np.concatenate([ids[:-1], sequel])
        _, enc = encode.bounded(ctx, joint, ctx.settings.scales, prior=True)
    written = encode.word_work(ctx, clause, ids).all()
    if not written:
        return None
    seams, frames, keys = _seams(ctx, ids, enc, written)
    if version == 0:
        playable = len(seams)
    else:  # the gaps before the last written word's first phoneme
        last = written[-1].start + 1
        playable = sum(1 for p in seams if p <= last)
        _drop_unplayed(ctx, enc, frames[playable - 1] if playable else 0)
    return Take(clause, version, ids, enc, seams, frames, keys, playable, written)


def _drop_unplayed(ctx: EncodeContext, enc: Encoded, end: int) -> None:
    """A draft's latent past frame ``end`` (its last playable gap) and the context the
    frames before it need (the decoder's, then the flow's): dropped, so that no flow runs
    over its last word or its sequel.  Its durations stay whole (its seams were read)."""
    keep = end + ctx.settings.context + ctx.voice.model.flow_context
    if enc.z_p is not None and enc.ready == 0 and keep < enc.frames:
        enc.z, enc.z_p = enc.z[:, :, :keep], enc.z_p[:, :, :keep]


SEQUELS = {"en": "in a minute or two"}
"""What a draft is encoded with after its last written word, by language: a sentence still
being written goes on, and a draft that ended at its last word was spoken as a short
sentence's end (slower: its first words 4–11 % longer on average than in the whole
sentence, up to 37 %; measured on sentences the bench does not use).  Never played: a
draft plays only up to the gap before its last written word."""


def _sequel(ctx: EncodeContext) -> IntArray | None:
    """The ids a draft is followed by (a word gap, then :data:`SEQUELS`'s words, and the
    end), or None for a language without one (its drafts end at their last word)."""
    ph = ctx.voice.phonemizer
    text = SEQUELS.get(ph.info.espeak_voice.split("-")[0])
    if text is None:
        return None
    return ph.ids_for([" ", *ph.phonemes(text)])[2:]


def _seams(
    ctx: EncodeContext, ids: IntArray, enc: Encoded, written: list[wordtimes.WrittenWord]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The word gaps no written word straddles, their frames and their text positions."""
    is_space = ctx.voice.phonemizer.is_space
    cum = np.concatenate([[0.0], np.cumsum(enc.durations)])
    seams: list[int] = []
    frames: list[int] = []
    keys: list[int] = []
    w = 0  # written words wholly before the gap
    for k, i in enumerate(ids.tolist()):
        p = k + 2  # after the space and its pad: a word's first phoneme
        if not is_space(int(i)) or p >= len(ids):
            continue
        while w < len(written) and written[w].end <= k + 1:
            w += 1
        straddled = w < len(written) and written[w].start < k + 1
        key = written[w - 1].span[1] if w else -1
        if straddled or w == 0 or (keys and keys[-1] == key):
            continue
        seams.append(p)
        frames.append(round(float(cum[p])))
        keys.append(key)
    return tuple(seams), tuple(frames), tuple(keys)


def next_seam(take: Take, at: int, frames: int, frame_ms: float) -> int:
    """The seam a chunk from seam ``at`` goes to: the first ``frames`` or more on, else
    the last one it may be played to (``frame_ms`` for the cap of :data:`CHUNK_MS`)."""
    start = take.frames[at] if at >= 0 else 0
    last = take.playable - 1
    for j in range(at + 1, last + 1):
        if take.frames[j] - start >= frames:
            return j
    return last


# ------------------------------------------------------------------ loop half


class EagerHost(StartHost, Protocol):
    """What the eager start uses of the job, beyond a start strategy's host."""

    clauses: ClauseQueue

    def buffer_s(self) -> float:
        """Audio the listener holds but has not played yet."""
        ...

    @property
    def joins_in(self) -> bool:
        """A clause was spoken before this one (its first chunk fades in)."""
        ...

    def waiting_for_text(self) -> None:
        """The audio waits for text: the next chunk sent after the listener ran dry is a
        text wait, not a stall (``text_waits``)."""
        ...

    async def idle(self, timeout: float | None, emit: Emit) -> None:
        """Wait for the clause queue to change, at most ``timeout`` s, sending keep-alive
        silence if asked (``keepalive_ms``)."""
        ...


class EagerStart:
    """Speaks a sentence from its drafts until its whole clause takes over (see the
    module); keeps no state between sentences."""

    async def play(self, host: EagerHost, draft: Draft, emit: Emit) -> tuple[Clause, Voiced] | None:
        """The sentence's provisional audio, sent; then its clause and the rest of it,
        planned from the join (None: the request's text ended without it)."""
        return await _Sentence(host, draft, emit).play()


class _Sentence:
    """One sentence spoken from its drafts (on the loop)."""

    def __init__(self, host: EagerHost, draft: Draft, emit: Emit) -> None:
        self.host, self.emit, self.draft = host, emit, draft
        self.cur: Take | None = None
        self.at = -1
        """Seams of ``cur`` sent up to (-1: none)."""
        self.key = -1
        """Where the playhead is in the text as sent (-1: the sentence's start)."""
        self.tail: FloatArray | None = None
        """The last samples sent so far, held back: crossfaded into what follows."""
        self.making: asyncio.Future[tuple[Any, Any]] | None = None
        self.made: Take | None = None
        """An encoding made that has not joined yet."""
        self.asked = 0
        """The last draft version encoded (or being encoded)."""
        self.clause: Clause | None = None
        self.whole_asked = False
        self.words_end = 0.0

    async def play(self) -> tuple[Clause, Voiced] | None:
        host = self.host
        host.stats.eager_sentences += 1
        try:
            return await self._play()
        finally:
            host.clauses.want_draft(False)
            if self.making is not None:
                self.making.cancel()

    async def _play(self) -> tuple[Clause, Voiced] | None:
        host = self.host
        while True:
            self._collect()
            if self.made is not None and self._join(self.made):
                self.made = None
                if self.cur is not None and self.cur.final:
                    assert self.clause is not None
                    return self.clause, self._take_over(self.cur)
            if not self._find_clause():
                return None
            host.clauses.want_draft(self._wants_newer())
            self._encode_more()
            cur = self.cur
            if cur is not None and self.at < cur.playable - 1:
                if host.buffer_s() < self._ahead_s():
                    await self._send_next(cur)
                    continue
            await self._wait()

    def _ahead_s(self) -> float:
        """How much audio the listener may hold before more provisional audio is sent:
        less once the whole sentence is being encoded (it takes over sooner)."""
        return EAGER_AHEAD_S if self.clause is None else WHOLE_WAIT_S

    # -- encodings

    def _collect(self) -> None:
        fut = self.making
        if fut is None or not fut.done():
            return
        self.making = None
        take: Take | None = fut.result()[0]
        log.debug("made %s", take and (take.version, take.playable, take.keys))
        if take is None:
            return
        if not take.final:
            self.host.stats.eager_encodes += 1
        if self.cur is None and take.first is not None:
            self.cur = take
            return
        self.made = take

    def _find_clause(self) -> bool:
        """Take the sentence's clause once its segment is out; False: none will come."""
        q = self.host.clauses
        if self.clause is None and q.ready:
            self.clause = q.take_nowait()
        if q.draft is not None and q.draft.start == self.draft.start:
            if q.draft.version > self.draft.version:
                self.draft = q.draft
        return self.clause is not None or not q.closed

    def _encode_more(self) -> None:
        host, ctx = self.host, self.host.ctx
        if self.clause is not None and not self.whole_asked and self.making is not None:
            self.making.cancel()  # a draft's: the whole sentence is what is wanted now
            self.making = None
        if self.making is not None:
            return
        work: Callable[[], Take | None]
        if self.clause is not None and not self.whole_asked:
            self.whole_asked = True
            work = functools.partial(take_whole, ctx, self.clause)
        elif self.clause is None and self._wants(self.draft):
            opening = self.cur is None
            self.asked = self.draft.version
            work = functools.partial(take_draft, ctx, self.draft, opening)
        else:
            return
        log.debug(
            "encode %s", "whole" if self.whole_asked and self.clause else self.draft.clause.text
        )
        # Due when the audio made runs out: the provisional audio still to send plays first
        # (a burst of eager streams serves the decodes of those about to run dry first).
        self.making = host.submit(work, "encode", self._playable_s(self.cur))

    def _wants(self, draft: Draft) -> bool:
        """Encode this draft: nothing plays yet, or it has more words than what plays
        and the audio left is short (:data:`REENCODE_LEFT_S` with :data:`MIN_GROWTH` more
        words, :data:`URGENT_LEFT_S` with any)."""
        made = self._latest
        if not self._newer(draft):
            return False
        if made is None:
            return draft.words >= MIN_WORDS
        cur = self.cur
        if cur is None or cur.playable == 0:
            return cur is not None
        left = self._runway_s(cur)
        grown = draft.words - len(made.clause.word_spans)
        return left < URGENT_LEFT_S or (left < REENCODE_LEFT_S and grown >= MIN_GROWTH)

    @property
    def _latest(self) -> Take | None:
        """The encoding made last: one that has not joined yet, else the one playing."""
        return self.made if self.made is not None else self.cur

    def _newer(self, draft: Draft) -> bool:
        """``draft`` is not encoded yet and has more words than the encoding made last."""
        made = self._latest
        return draft.version > self.asked and (
            made is None or draft.words > len(made.clause.word_spans)
        )

    def _wants_newer(self) -> bool:
        """A newer draft would be encoded now if it had grown (the text stream drafts
        only then)."""
        cur = self.cur
        if self.clause is not None:
            return False
        return cur is None or cur.playable == 0 or self._runway_s(cur) < REENCODE_LEFT_S

    def _runway_s(self, cur: Take) -> float:
        """Audio left before the listener runs dry: what it holds and what ``cur`` may still
        play past the playhead."""
        return self.host.buffer_s() + self._playable_s(cur)

    def _playable_s(self, cur: Take | None) -> float:
        """Audio ``cur`` may still play past the playhead."""
        if cur is None or cur.playable == 0:
            return 0.0
        left_frames = cur.frames[cur.playable - 1] - (cur.frames[self.at] if self.at >= 0 else 0)
        return left_frames * self.host.ctx.frame_ms / 1000.0

    def _join(self, take: Take) -> bool:
        """Let ``take`` take over at the playhead's gap, if it has the same text before it
        (the whole clause at the next gap where it does, else where its words resume)."""
        j = take.index(self.key)
        if j is None and take.final and self._stuck():
            j = next((i for i, k in enumerate(take.keys) if k > self.key), len(take.keys)) - 1
        if j is None or (not take.final and j >= take.playable):
            return False
        self.cur, self.at = take, j
        log.debug("joined v%d at %d (key %d)", take.version, j, self.key)
        return True

    def _stuck(self) -> bool:
        cur = self.cur
        return cur is None or self.at >= cur.playable - 1

    # -- audio

    async def _send_next(self, cur: Take) -> None:
        host, ctx = self.host, self.host.ctx
        first, lead = self.at < 0, 0
        if first and cur.first is not None:
            b, audio = cur.first_to, cur.first
        else:
            b = next_seam(cur, self.at, round(CHUNK_MS / ctx.frame_ms), ctx.frame_ms)
            a = cur.frames[self.at] if self.at >= 0 else 0
            joins = self.tail is not None and a > 0
            work = functools.partial(decode_provisional, ctx, cur.enc, a - joins, cur.frames[b])
            audio, _ = await host.submit(work, "decode")
            if joins:
                assert self.tail is not None
                lead = len(self.tail)
                audio = joined(self.tail, audio, ctx.voice.hop)
        host.stats.windows += 1
        await self._emit(cur, b, audio, first, lead)

    async def _emit(self, cur: Take, b: int, audio: FloatArray, first: bool, lead: int) -> None:
        """Send a provisional chunk (``lead``: samples of it crossfaded before its first
        frame), its last samples held back for the next join."""
        host, ctx = self.host, self.host.ctx
        clause = cur.clause
        fade_in = ctx.fade if (first and host.joins_in) or (not first and self.tail is None) else 0
        audio = fade(audio, fade_in, 0)
        n = min(ctx.fade, len(audio) // 2)
        send, self.tail = audio[: len(audio) - n], audio[len(audio) - n :]
        before = silence_samples(clause.pause_before_ms, ctx.voice.sample_rate) if first else 0
        pa = cur.seams[self.at] if self.at >= 0 else 0
        self._place_words(cur, pa, cur.seams[b], before, lead)
        span = self._span(cur, b)
        volume = ctx.settings.volume * clause.volume
        await host.send(Shaped(gain(send, volume), before), Place(span), self.emit)
        log.debug("sent to %d (%s) buffer %.3f", b, span, host.buffer_s())
        host.grow(cur.frames[b] - (cur.frames[self.at] if self.at >= 0 else 0))
        self.at, self.key = b, cur.keys[b]

    def _span(self, cur: Take, b: int) -> tuple[int, int]:
        """The text a chunk from the playhead to seam ``b`` says: whole written words."""
        if self.at < 0:
            return cur.clause.span[0], cur.keys[b]
        seam = cur.seams[self.at]
        start = next((w.span[0] for w in cur.written if w.start >= seam - 1), cur.keys[b])
        return min(start, cur.keys[b]), cur.keys[b]

    def _place_words(self, cur: Take, pa: int, pb: int, before: int, lead: int) -> None:
        """The chunk's written words (those that start between its gaps), timed by its
        encoding's frames."""
        tl = self.host.timeline
        if not tl.words and not tl.visemes:
            return
        ctx = self.host.ctx
        rate, hop = ctx.voice.sample_rate, ctx.voice.hop
        fa = cur.frames[self.at] if self.at >= 0 else 0
        s0 = fa * hop - lead  # the sent audio starts ``lead`` samples before frame fa
        t0 = tl.next_ms() + before * 1000.0 / rate
        cum = np.concatenate([[0.0], np.cumsum(cur.enc.durations)])

        def at(p: int, _start: bool) -> float:
            return t0 + (float(cum[min(p, len(cum) - 1)]) * hop - s0) * 1000.0 / rate

        def keep(w: wordtimes.WrittenWord) -> bool:
            return pa - 1 <= w.start < pb - 1

        tl.place_visemes(cur.ids, at, keep)
        end = tl.place_words(cur.written, at, keep)
        self.words_end = max(self.words_end, end)

    async def _wait(self) -> None:
        """Until an encoding is made, the clause or a longer draft comes, or the listener
        needs more audio; the audio waits for text when nothing could go on."""
        host, cur = self.host, self.cur
        can_send = cur is not None and self.at < cur.playable - 1
        left = host.buffer_s()
        if not can_send and self.making is None:
            host.waiting_for_text()
        if not can_send and self.tail is not None and left < DRY_S:
            await self._fade_out()  # the listener runs dry at a word gap: end it softly
            return
        timeout = self._timeout(left, can_send)
        log.debug("wait send=%s left=%.3f making=%s", can_send, left, self.making is not None)
        if self.making is None:
            await host.idle(timeout, self.emit)
            return
        changed: asyncio.Future[Any] = asyncio.ensure_future(host.clauses.changed(timeout))
        waits: list[asyncio.Future[Any]] = [self.making, changed]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()

    def _timeout(self, left: float, can_send: bool) -> float | None:
        """How long :meth:`_wait` may wait: until more audio is due, the listener is about
        to run dry, or a longer draft known now must be encoded (:data:`URGENT_LEFT_S`)."""
        due = [left - (self._ahead_s() if can_send else DRY_S)] if left > 0 else []
        cur = self.cur
        if cur is not None and self.making is None and self.clause is None and cur.playable:
            if not self.host.clauses.draft_wanted:
                due.append(self._runway_s(cur) - REENCODE_LEFT_S)
            elif self._newer(self.draft):
                due.append(self._runway_s(cur) - URGENT_LEFT_S)
        return max(0.005, min(due)) if due else None

    async def _fade_out(self) -> None:
        assert self.tail is not None
        tail, self.tail = fade(self.tail, 0, len(self.tail)), None
        cur = self.cur
        assert cur is not None
        await self.host.send(Shaped(tail), Place((self.key, self.key)), self.emit)

    def _take_over(self, take: Take) -> Voiced:
        host = self.host
        assert self.clause is not None
        rest = EncodedClause(take.ids, take.enc, None, written=take.written)
        if self.at < 0:
            return host.plan(self.clause, rest)
        seam = take.seams[self.at] if self.at < len(take.seams) else len(take.ids)
        # After the audio ran dry (faded out), silence "crossfaded" in: a fade-in.
        tail = self.tail if self.tail is not None else np.zeros(host.ctx.fade, np.float32)
        start = int(np.cumsum(take.enc.durations)[seam - 1])
        skip_latent(take.enc, start - 1, host.ctx.settings.context)
        opening = Provisional(seam, 0, tail, tail, take.ids, take.enc.durations)
        heard = Heard(0, self.words_end)
        return take_over(host, self.clause, rest, opening, take.enc, JoinWords(seam), heard)
