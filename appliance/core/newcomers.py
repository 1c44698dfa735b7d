"""When a request's first item may go ahead of due work: the scheduler's newcomer rule.

The watermark makes a stream's next window due long before its listener runs dry, so a
newcomer's first item would wait behind windows whose listeners still have audio in
hand.  It goes first when every due item, run after it one after another, still
finishes by its ``slack_until`` (when its listener, playing from its first chunk with a
100 ms jitter buffer, runs dry).  Two due windows that could each wait for a newcomer
may not both: one worker runs them in turn.  How long items take comes from running
means of the runs seen: first items, and items run because they were due.

Thread: the scheduler's workers, under its lock.  Bounds: two floats and a count.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

FIRST_ITEM_PRIOR_S = 0.05
"""What a first item is assumed to take before one has run (~35 ms measured on a slow core)."""
DUE_ITEM_PRIOR_S = 0.05
"""What a due item (a later window or clause) is assumed to take before one has run."""
_SMOOTHING = 0.2


class Queued(Protocol):
    """What the rule reads of a queued item."""

    urgent: bool
    deadline: float
    slack_until: float | None

    def __lt__(self, other: Any, /) -> bool: ...


Q = TypeVar("Q", bound=Queued)


class NewcomerRule:
    """The rule and the run times it learns (see the module)."""

    def __init__(self) -> None:
        self.first_item_s = FIRST_ITEM_PRIOR_S
        """Running mean of how long a request's first (urgent) item runs."""
        self.due_item_s = DUE_ITEM_PRIOR_S
        """Running mean of how long a real-time item picked because it was due runs."""
        self.ahead = 0
        """First items started ahead of due work that could wait for them."""

    def pick(self, queue: Iterable[Q], now: float) -> Q | None:
        """The queued first item that may go ahead of the due work, if one may."""
        first: Q | None = None
        dry: list[float] = []
        for item in queue:
            if item.urgent:
                if first is None or item < first:
                    first = item
            elif item.deadline <= now:
                if item.slack_until is None:
                    return None  # no audio in hand: nothing can wait
                dry.append(item.slack_until)
        done = now + self.first_item_s
        for slack_until in sorted(dry):
            done += self.due_item_s
            if slack_until < done:
                return None
        return first

    def observe(self, urgent: bool, due: bool, run_s: float) -> None:
        """An item ran for ``run_s``: a first item (``urgent``), or one picked as due."""
        if urgent:
            self.first_item_s += _SMOOTHING * (run_s - self.first_item_s)
        elif due:
            self.due_item_s += _SMOOTHING * (run_s - self.due_item_s)
