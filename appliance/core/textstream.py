"""Text that streams in (a language model writing token by token): when to start speaking.

:func:`release_point` is the rule, pure and table-tested: how many leading characters
of the text not yet spoken may be spoken now.

- A segment ends at a sentence end followed by whitespace (the next sentence's first
  letter is not awaited).  Sentence ends are the frontend's own
  (:func:`appliance.text.frontend.split_sentences`), so "Dr.", "e.g.", "3.50", "3:30 pm"
  are never cut.
- A sentence end that nothing after it can undo (``?``, ``!``, a full stop after a word
  that is no abbreviation, initial or number: :func:`appliance.text.frontend.ends_finally`)
  is released as it arrives, without waiting for the whitespace after it: the first
  sound no longer waits for the writer's next token.  A closing quote or a second dot that
  comes in the next token then goes with the next segment (nothing is said for it).
- The first segment of a request is also released at a clause mark (``, ; :`` or a
  spaced dash, followed by whitespace) once it holds ``first_chars`` characters: the one
  documented trade of prosody for latency in a stream (the rest of the sentence has not
  arrived; waiting for it would hold the first sound for as long as the writer takes).
- After ``idle_ms`` without new text, what is buffered is spoken up to its last clause
  mark, else its last word boundary (a word still being typed waits): the only time a
  segment ends at a bare space.
- When the listener is about to run out of audio (less than ``low_water_ms`` left to
  play) a later segment is released at its last clause mark: a pause where the text has
  one rather than a stall.
- A segment never waits beyond ``max_chars``: it is cut as the frontend cuts a sentence
  that long (:func:`appliance.text.frontend.long_sentence_cut`: ``; :`` or a dash, else a
  comma, else a space).
- ``flush`` and ``finish`` release everything.

:class:`TextFeed` applies the rule to a live request: it keeps the text as sent, runs
the frontend on each released segment (spans shifted so they index the concatenated
text as sent) and hands the clauses to the request's :class:`ClauseQueue`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from appliance.core.pipeline.clauses import ClauseQueue
from appliance.errors import ErrorCode, ServiceError
from appliance.text.frontend import (
    Clause,
    clean,
    ends_finally,
    is_sentence_end_at,
    long_sentence_cut,
    split_sentences,
)

log = logging.getLogger(__name__)

_CLAUSE_MARK = re.compile(r"[,;:](?=\s)|\s[-–—](?=\s)")
_NOT_A_PARAGRAPH = re.compile(r"\s*(?:\||```|~~~)|(?: {4}|\t)")
"""Markdown that is drafted for an eager start only inside a paragraph's first line."""

# Where a run starts and possessive (as the frontend's own pattern): no backtracking.
_SENTENCE_TAIL = re.compile(r"(?<![.!?])[.!?]++[\"')\]]*+$")


@dataclass(frozen=True)
class SegmentRule:
    first_chars: int = 40
    max_chars: int = 400
    idle_ms: float = 300.0
    low_water_ms: float = 400.0


def _sentence_cut(pending: str) -> int:
    """End (in ``pending``) of the last whole sentence that is followed by whitespace."""
    cuts = _known_cuts(pending)
    return cuts[-1] if cuts else 0


@dataclass(frozen=True)
class _Scan:
    text: str
    cuts: tuple[int, ...]
    """Every sentence cut in ``text``, ascending."""


_CONTEXT = 128
"""Characters either side of a cut that its decision may read (the abbreviation before it,
the capital after it), with room to spare."""
_recent: tuple[_Scan, ...] = ()
"""The last texts scanned.  A text feed asks about the rest of a text after each release
and about the same text with an append; scanning each afresh was quadratic (one 20 000
character append without a sentence end was cleaned 80 times on the event loop)."""


def _known_cuts(pending: str) -> tuple[int, ...]:
    """The sentence cuts of ``pending``, rescanning only what a recent scan does not cover."""
    global _recent
    cuts = None
    for scan in _recent:
        if scan.text.endswith(pending):  # what is left after a release
            k = len(scan.text) - len(pending)
            head = _scan_cuts(pending[: 2 * _CONTEXT], 0)  # decided again without the left
            cuts = tuple(c for c in head if c < _CONTEXT)
            cuts += tuple(c - k for c in scan.cuts if c - k >= _CONTEXT)
            break
        if len(scan.text) > 2 * _CONTEXT and pending.startswith(scan.text):  # an append
            keep = len(scan.text) - _CONTEXT
            cuts = tuple(c for c in scan.cuts if c < keep)
            cuts += tuple(c for c in _scan_cuts(pending, keep - _CONTEXT) if c >= keep)
            break
    if cuts is None:
        cuts = _scan_cuts(pending, 0)
    _recent = (_Scan(pending, cuts), *_recent[:3])
    return cuts


def sentence_cuts(text: str) -> tuple[int, ...]:
    """Every place in ``text`` where :func:`release_point` ends a segment at a sentence end
    (just after it, before the whitespace that follows it), ascending.  A cut is decided by
    the text up to :data:`_CONTEXT` characters after it: a prefix that long past a cut gives
    the whole text's decision."""
    return _scan_cuts(text, 0)


def _scan_cuts(text: str, start: int) -> tuple[int, ...]:
    """Sentence cuts of ``text`` from ``start`` on: ends of sentences followed by whitespace."""
    pieces = split_sentences(clean(text[start:]))
    cuts: list[int] = []
    for k, piece in enumerate(pieces):
        _a, end = piece.span(0, len(piece))
        end += start
        if end >= len(text) or not text[end].isspace():
            continue
        if k == len(pieces) - 1:
            # The splitter also ends the text's tail; only a real sentence end counts.
            m = _SENTENCE_TAIL.search(piece.text)
            if m is None or not is_sentence_end_at(piece.text, m.start()):
                continue
        cuts.append(end)
    return tuple(cuts)


def release_point(
    pending: str,
    rule: SegmentRule,
    *,
    first: bool,
    idle: bool = False,
    flush: bool = False,
    low: bool = False,
) -> int:
    """How many leading characters of ``pending`` (text not yet spoken) to speak now.

    ``idle``: no new text for a while; ``low``: the listener is running out of audio."""
    if flush:
        return len(pending)
    cut = _sentence_cut(pending)
    if cut:
        return cut
    final = ends_finally(pending)
    if final:
        return final
    if first:
        for m in _CLAUSE_MARK.finditer(pending):
            if m.end() >= rule.first_chars:
                return m.end()
    if idle or low:
        marks = [m.end() for m in _CLAUSE_MARK.finditer(pending)]
        if marks:
            return marks[-1]
    if idle:
        space = max(pending.rfind(" "), pending.rfind("\n"))
        return space if space > 0 else 0
    if len(pending) > rule.max_chars:
        return long_sentence_cut(pending, rule.max_chars)
    return 0


class Release(Protocol):
    """A release rule: :func:`release_point`, or Markdown's
    (:func:`appliance.core.markdownstream.markdown_release_point`)."""

    def __call__(
        self,
        pending: str,
        rule: SegmentRule,
        *,
        first: bool,
        idle: bool = False,
        flush: bool = False,
        low: bool = False,
    ) -> int: ...


Prepare = Callable[[str, bool], Awaitable[list[Clause]]]
"""Runs the frontend on one segment (``True`` for the request's first): clauses with spans
into that segment."""


class TextFeed:
    """The text of one streaming request: appends in, clauses out, in order."""

    def __init__(
        self,
        queue: ClauseQueue,
        prepare: Prepare,
        rule: SegmentRule,
        max_total_chars: int,
        timeout_s: float,
        on_error: Callable[[ServiceError], None],
        audio_left: Callable[[], float | None] = lambda: None,
        release: Release = release_point,
        eager: bool = False,
        markdown: bool = False,
    ) -> None:
        self._queue = queue
        self._release_point = release
        self._prepare = prepare
        self._rule = rule
        self._max_total = max_total_chars
        self._timeout_s = timeout_s
        self._on_error = on_error
        self.text = ""
        """Everything appended so far: the text as sent."""
        self._spoken = 0
        """Characters of ``text`` already released."""
        self._segments: asyncio.Queue[tuple[int, str, bool] | bool | None] = asyncio.Queue()
        """Released segments; True (eager starts): draft the rest now; None: finished."""
        self._eager = eager
        """``text_start: eager``: the text not yet released is drafted for the job (its
        words are spoken before the sentence ends), the first segment is not cut at a
        clause mark, the low-water cut is off (the draft plays on), and the idle rule
        releases up to the last word boundary (the words before it may have been said)."""
        self._markdown = markdown
        self._draft_queued = False
        self._first = True
        self.finished = False
        self.failed = False
        self._clauses_out = 0
        self._audio_left = audio_left
        """Seconds of audio the listener still has to play; None before the first chunk."""
        loop = asyncio.get_running_loop()
        self._idle: asyncio.TimerHandle | None = None
        self._low: asyncio.TimerHandle | None = None
        self._timeout = loop.call_later(timeout_s, self._timed_out)
        self._task = loop.create_task(self._feed())

    # -- from the door (on the event loop)

    def append(self, text: str, flush: bool = False) -> None:
        if self.finished or self.failed:
            raise ServiceError(ErrorCode.BAD_REQUEST, "the text of this request is finished")
        if len(self.text) + len(text) > self._max_total:
            self._fail(
                ServiceError(
                    ErrorCode.TEXT_TOO_LONG,
                    f"text would have {len(self.text) + len(text)} characters;"
                    f" the limit is {self._max_total}",
                )
            )
            return
        self.text += text
        self._timeout.cancel()
        self._timeout = asyncio.get_running_loop().call_later(self._timeout_s, self._timed_out)
        self._release(flush=flush)
        self._arm_idle()
        if self._eager and not self._draft_queued and self._spoken < len(self.text):
            self._draft_queued = True
            self._segments.put_nowait(True)

    def finish(self) -> None:
        if self.finished or self.failed:
            raise ServiceError(ErrorCode.BAD_REQUEST, "the text of this request is finished")
        self.finished = True
        self._timeout.cancel()
        if self._idle is not None:
            self._idle.cancel()
        self._release(flush=True)
        self._segments.put_nowait(None)

    def close(self) -> None:
        """The request ended: stop timers and the feeding task."""
        self._timeout.cancel()
        for timer in (self._idle, self._low):
            if timer is not None:
                timer.cancel()
        self._task.cancel()

    # -- inside

    def _release(self, flush: bool = False, idle: bool = False, low: bool = False) -> None:
        while self._spoken < len(self.text):
            pending = self.text[self._spoken :]
            first = self._first and not self._eager
            n = self._release_point(
                pending, self._rule, first=first, idle=idle, flush=flush, low=low
            )
            if idle and self._eager:
                n = max(n, word_cut(pending, self._markdown))
            if n <= 0:
                return
            if pending[:n].strip():
                self._segments.put_nowait((self._spoken, pending[:n], self._first))
                self._first = False
            self._spoken += n

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        if self._spoken < len(self.text) and self._rule.idle_ms > 0:
            self._idle = asyncio.get_running_loop().call_later(
                self._rule.idle_ms / 1000.0, self._release, False, True
            )
        self._watch_low_water()

    def _watch_low_water(self) -> None:
        """While text waits, look every 50 ms whether the listener is running dry."""
        if self._low is not None or self._first or self._eager or self._rule.low_water_ms <= 0:
            return
        if self._spoken >= len(self.text) or self.finished or self.failed:
            return

        def check() -> None:
            self._low = None
            left = self._audio_left()
            if left is not None and left * 1000.0 < self._rule.low_water_ms:
                self._release(low=True)
            self._watch_low_water()

        self._low = asyncio.get_running_loop().call_later(0.05, check)

    def _timed_out(self) -> None:
        self._fail(
            ServiceError(
                ErrorCode.TEXT_TIMEOUT,
                f"no text and no finish for {self._timeout_s:g} s",
            )
        )

    def _fail(self, exc: ServiceError) -> None:
        if self.failed:
            return
        self.failed = True
        self.close()
        # No more clauses come: a job waiting for them ends (the request then ends with
        # ``exc`` through on_error, even when it fails before its job started).
        self._queue.close()
        self._on_error(exc)

    async def _feed(self) -> None:
        while True:
            item = await self._segments.get()
            if isinstance(item, bool):
                self._draft_queued = False
                await self._draft()
                continue
            if item is None:
                if self._clauses_out == 0:
                    self._fail(ServiceError(ErrorCode.EMPTY_TEXT, "text has nothing to speak"))
                    return
                self._queue.close()
                return
            offset, segment, first = item
            try:
                clauses = await self._prepare(segment, first)
            except ServiceError as exc:
                if exc.code == ErrorCode.EMPTY_TEXT:
                    continue  # punctuation or symbols alone: nothing to say, not an error
                self._fail(exc)
                return
            except Exception as exc:  # a bug in the frontend: this request ends, not silently
                log.exception("text stream: the frontend failed on a segment")
                self._fail(ServiceError(ErrorCode.INTERNAL, type(exc).__name__))
                return
            clauses = [shift_clause(c, offset) for c in clauses]
            self._clauses_out += len(clauses)
            self._queue.put(clauses)
            self._queue.put_draft(None)  # it drafted this segment's text

    async def _draft(self) -> None:
        """The text not yet released, read by the frontend as one clause for the job to
        start speaking (a sentence still being written); read as it is now, after every
        segment released before it is out."""
        offset = self._spoken
        pending = self.text[offset:]
        if not draftable(pending, self._rule, self._markdown):
            self._queue.put_draft(None)
            return
        try:
            clauses = await self._prepare(pending, self._first)
        except ServiceError:
            clauses = []  # nothing to say yet, or a refusal its segment will meet
        except Exception:  # a draft is optional: its segment meets the frontend again
            log.exception("text stream: the frontend failed on a draft")
            clauses = []
        if self._spoken != offset or self.failed:
            return  # released meanwhile: the next draft, if any, is queued
        self._queue.put_draft(shift_clause(clauses[0], offset) if clauses else None)


def safe_cut(segment: str) -> bool:
    """May a segment end here: no link, tag or code span left open, and words on its last
    line (not a bare list marker)?"""
    if segment.count("[") > segment.count("]") or segment.count("<") > segment.count(">"):
        return False
    if segment.count("`") % 2:
        return False
    last = segment.rsplit("\n", 1)[-1]
    return any(c.isalnum() for c in last) or not last.strip()


def draftable(pending: str, rule: SegmentRule, markdown: bool) -> bool:
    """Is text not yet released worth a draft: two words or more (one to say, one ahead),
    no longer than a segment may be, and in Markdown a paragraph's first line (lists,
    headings, fences and tables are released whole)?"""
    if len(pending) > rule.max_chars or len(pending.split(None, 2)) < 2:
        return False
    return not markdown or ("\n" not in pending.strip() and not _NOT_A_PARAGRAPH.match(pending))


def word_cut(pending: str, markdown: bool) -> int:
    """An eager start's idle cut: the last word boundary (every word before it may have
    been said), in Markdown only where no link, tag or code span is left open."""
    cut = max(pending.rfind(" "), pending.rfind("\n"))
    if cut <= 0 or (markdown and not safe_cut(pending[:cut])):
        return 0
    return cut


def shift_clause(clause: Clause, offset: int) -> Clause:
    """The clause with its spans moved by ``offset`` characters."""
    a, b = clause.span
    return dataclasses.replace(
        clause,
        span=(a + offset, b + offset),
        word_spans=tuple((x + offset, y + offset) for x, y in clause.word_spans),
    )
