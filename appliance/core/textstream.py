"""Text that streams in (a language model writing token by token): when to start speaking.

The rule is the text layer's (:func:`appliance.text.cuts.stream.release_point`, and
Markdown's :func:`appliance.text.cuts.blocks.markdown_release_point`; what each cut means:
:mod:`appliance.text.cuts`): how many leading characters of the text not yet spoken may
be spoken now.  ``flush`` and ``finish`` release everything.

:class:`TextFeed` applies the rule to a live request: it keeps the text as sent, runs
the frontend on each released segment (spans shifted so they index the concatenated
text as sent) and hands the clauses to the request's :class:`ClauseQueue`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from appliance.core.pipeline.clauses import ClauseQueue
from appliance.errors import ErrorCode, ServiceError
from appliance.text.cuts.blocks import markdown_release_point
from appliance.text.cuts.stream import (
    ON_TEXT,
    Occasion,
    SegmentRule,
    draftable,
    release_point,
    word_cut,
)
from appliance.text.frontend import Clause

log = logging.getLogger(__name__)


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
        eager: bool = False,
        markdown: bool = False,
    ) -> None:
        self._queue = queue
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
        """``text_start: eager``: the text not yet released is drafted when the job asks
        (``queue.draft_wanted``: its words are spoken before the sentence ends), the first
        segment is not cut at a clause mark, the low-water cut is off (the draft plays on),
        and the idle rule releases up to the last word boundary (the words before it may
        have been said)."""
        self._markdown = markdown
        """``text_format: markdown``: released by :func:`markdown_release_point` (not
        :func:`release_point`); an eager start drafts only a paragraph's first line and
        cuts it only where no link, tag or code span is left open."""
        self._release_point = markdown_release_point if markdown else release_point
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
        queue.on_want = self._queue_draft

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
        self._release(Occasion(flush=flush))
        self._arm_idle()
        if self._queue.draft_wanted:
            self._queue_draft()

    def _queue_draft(self) -> None:
        """Draft the text not yet released (once the segments before it are out)."""
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
        self._release(Occasion(flush=True))
        self._segments.put_nowait(None)

    def close(self) -> None:
        """The request ended: stop timers and the feeding task."""
        self._timeout.cancel()
        for timer in (self._idle, self._low):
            if timer is not None:
                timer.cancel()
        self._task.cancel()

    # -- inside

    def _release(self, why: Occasion = ON_TEXT) -> None:
        while self._spoken < len(self.text):
            pending = self.text[self._spoken :]
            first = self._first and not self._eager
            n = self._release_point(pending, self._rule, dataclasses.replace(why, first=first))
            if why.idle and self._eager:
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
                self._rule.idle_ms / 1000.0, self._release, Occasion(idle=True)
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
                self._release(Occasion(low=True))
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


def shift_clause(clause: Clause, offset: int) -> Clause:
    """The clause with its spans moved by ``offset`` characters."""
    a, b = clause.span
    return dataclasses.replace(
        clause,
        span=(a + offset, b + offset),
        word_spans=tuple((x + offset, y + offset) for x, y in clause.word_spans),
    )
