"""A request's clauses as they become known, and the draft of the one being written.

:class:`ClauseQueue` holds the clauses of a request: all at once for a text, segment by
segment for text that streams in (:class:`appliance.core.textstream.TextFeed` puts them),
closed when no more will come.  With an eager start (``text_start: eager``, issue 44) it
also holds a :class:`Draft`: the frontend's reading of the text written so far that no
segment has released yet (a sentence still being written), replaced as words arrive and
dropped when the segment that completes it is put.  The job speaks a draft's words up to
the last one (:mod:`appliance.core.pipeline.eager`) while it waits for the clause.  The
job says when it would speak from a newer draft (:meth:`ClauseQueue.want_draft`): text
that streams in is drafted only then, not on every word of a reply whose audio is far
ahead of where it is needed.

Thread: the event loop only.  Bounds: the clauses of the text released so far (the text
is capped by ``limits.max_text_chars``) and one draft (capped by the release rule's
``max_chars``).  Lives as long as its request.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.text.frontend import Clause


@dataclass(frozen=True)
class Draft:
    """The text known so far of a sentence still being written, as one clause (spans
    index the text as sent); ``version`` grows with each new draft of a request."""

    version: int
    clause: Clause

    @property
    def start(self) -> int:
        """Where its text starts in the text as sent (its segment's first clause's too)."""
        return self.clause.span[0]

    @property
    def words(self) -> int:
        return len(self.clause.word_spans)


class ClauseQueue:
    """A request's clauses as they become known: all at once for a text, segment by
    segment for text that streams in.  Closed when no more will come."""

    def __init__(self, clauses: list[Clause] | None = None, closed: bool = True) -> None:
        self._items: collections.deque[Clause] = collections.deque(clauses or ())
        self._closed = closed
        self._changed = asyncio.Event()
        self.chars_total = sum(len(c.text) for c in self._items)
        self.draft: Draft | None = None
        """The sentence being written (eager starts only); None: none."""
        self._drafts = 0
        self.draft_wanted = True
        """The job would speak from a newer draft now (a text stream's first words always)."""
        self.on_want: Callable[[], None] | None = None
        """Called when :attr:`draft_wanted` becomes true (the feed drafts the text now)."""

    def want_draft(self, wanted: bool) -> None:
        """Whether the job would speak from a newer draft now than the one it has."""
        was, self.draft_wanted = self.draft_wanted, wanted
        if wanted and not was and self.on_want is not None:
            self.on_want()

    def put(self, clauses: list[Clause]) -> None:
        self._items.extend(clauses)
        self.chars_total += sum(len(c.text) for c in clauses)
        self._changed.set()

    def put_draft(self, clause: Clause | None) -> None:
        """The text written so far past the released segments (None: none is pending)."""
        if clause is None and self.draft is None:
            return
        self._drafts += 1
        self.draft = Draft(self._drafts, clause) if clause is not None else None
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

    @property
    def ready(self) -> bool:
        """A clause waits to be taken."""
        return bool(self._items)

    def take_nowait(self) -> Clause | None:
        return self._items.popleft() if self._items else None

    async def changed(self, timeout: float | None = None) -> None:
        """Until a clause or a draft is put or the queue is closed (or ``timeout`` s)."""
        self._changed.clear()
        if timeout is None:
            await self._changed.wait()
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    async def take(self) -> Clause | None:
        """The next clause, waiting for it if needed; None once closed and empty."""
        while not self._items:
            if self._closed:
                return None
            await self.changed()
        return self._items.popleft()
