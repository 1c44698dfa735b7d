"""The clauses a request encodes ahead: taken from its clause queue while the current one
plays, each with its encode submitted and a due time that says when its audio is needed.

Policy (:meth:`ClausesAhead.fill`): one clause ahead; two while the request's work is all
the scheduler has (:data:`PREFETCH_DEPTH`); on a first clause with more than
:data:`PREFETCH_HOLD_S` of audio left after its first chunk, beside other requests'
work, none until its second chunk is out.  Alone where each worker has a core of its
own, one already beside the request's first item (:meth:`ClausesAhead.open`).

Thread: the event loop only (the job's).  Bounds: at most :data:`PREFETCH_DEPTH` clauses
and their futures; :meth:`ClausesAhead.cancel` cancels those not taken, when the job
ends.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appliance.core.pipeline.clauses import ClauseQueue

if TYPE_CHECKING:
    from appliance.text.frontend import Clause

PREFETCH_DEPTH = 2
"""Clauses encoded ahead while the request's work is all the scheduler has (else one)."""
CHAR_S = 0.04
"""Audio per character of text at speed 1 (the bundled voice: ~18 s for 461 characters),
until a request's own rate is known: when an encode two clauses ahead falls due."""
PREFETCH_HOLD_S = 1.0
"""A first clause with more audio than this left after its first chunk encodes the next
clause only after its second chunk, beside other requests' work (see
:meth:`ClausesAhead.fill`)."""

Submit = Callable[["Clause", float], "asyncio.Future[Any]"]
"""Submit a clause's encode, due when the listener needs that many seconds more audio."""


class ClausesAhead:
    """The next clauses of one request and their encodes (see the module)."""

    def __init__(self, clauses: ClauseQueue, submit: Submit, lone: Callable[[], bool]) -> None:
        self._clauses = clauses
        self._submit = submit
        self._lone = lone
        """Whether the request's work is all the scheduler has (``Scheduler.lone``)."""
        self._next: collections.deque[tuple[Clause, asyncio.Future[Any]]] = collections.deque()

    def __len__(self) -> int:
        return len(self._next)

    def peek(self) -> Clause | None:
        """The next clause, if one is encoded ahead."""
        return self._next[0][0] if self._next else None

    def take(self, clause: Clause) -> asyncio.Future[Any] | None:
        """``clause``'s encode, if it is the next one encoded ahead (now taken)."""
        if self._next and self._next[0][0] is clause:
            return self._next.popleft()[1]
        return None

    def open(self, first: Clause) -> None:
        """Encode the clause after ``first`` while ``first``'s item runs, when the request
        is alone: the scheduler runs it on the core that item leaves idle where each worker
        has one of its own (``Scheduler.own_cores``), else after it.  Due once ``first``'s
        audio (estimated at :data:`CHAR_S`) will have played.

        A whole 8 s request read as fast as it comes ran its first item on one core while
        the other waited ~45 ms for the encode submitted after it."""
        if self._next or not self._lone():
            return
        if (nxt := self._clauses.take_nowait()) is not None:
            self._next.append((nxt, self._submit(nxt, len(first.text) * CHAR_S)))

    def fill(self, ahead_s: float, first_chunks: bool, per_char: float | None) -> None:
        """Encode the next clauses now, the first due when this clause's audio runs out
        (``ahead_s`` from now), the second once the first will have played.

        ``first_chunks``: only the request's first chunk is out.  Then, while this clause
        has more than :data:`PREFETCH_HOLD_S` of audio left and other requests have work,
        not yet: the second chunk's item (the flow over the rest of the first sentence)
        must land within the first chunk's ~0.12 s, and beside other streams an encode
        beside it took half the cores (it ran 0.23–0.29 s against the 0.22 s it had: a
        stall).  Alone, that item hands half its flow to the other core first (a part goes
        before work ahead) and the encode follows on the core that comes free.

        While the request's work is all the scheduler has, the clause after it too
        (:data:`PREFETCH_DEPTH`): a whole request read as fast as it comes ran its last
        long sentence's prior alone at its end, ~120 ms, while the other core waited.
        ``per_char``: the request's audio per character so far (None: :data:`CHAR_S`)."""
        lone = self._lone()
        if first_chunks and ahead_s > PREFETCH_HOLD_S and not lone:
            return
        depth = PREFETCH_DEPTH if lone else 1
        while len(self._next) < depth and (nxt := self._clauses.take_nowait()) is not None:
            due_s = ahead_s + self._queued_chars() * (CHAR_S if per_char is None else per_char)
            self._next.append((nxt, self._submit(nxt, due_s)))

    def _queued_chars(self) -> int:
        return sum(len(c.text) for c, _fut in self._next)

    def cancel(self) -> None:
        """Cancel the encodes not taken (the job ends), and let go of the job: ``submit``
        and ``lone`` are its own, and the cycle job → this → job would keep the job, its
        output and timeline until a collection walked it, not until its last reference
        went (every request's, in a serving daemon; docs/speed.md, stop 67)."""
        for _clause, fut in self._next:
            fut.cancel()
        self._next.clear()
        self._submit = _ended
        self._lone = _alone_ended


def _ended(clause: Clause, due_s: float) -> asyncio.Future[Any]:
    raise RuntimeError("the job has ended: nothing more is encoded ahead")


def _alone_ended() -> bool:
    return False
