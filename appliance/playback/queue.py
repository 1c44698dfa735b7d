"""speech-dispatcher's message priorities, as pure queue logic (no audio, no threads).

The rules follow the SSIP "Message Priority Model" of speech-dispatcher:

``important``
    Spoken before everything else and never interrupted.  Importants queue among themselves
    in order.  An arriving important cuts whatever non-important is speaking, drops waiting
    ``notification``/``progress`` messages and postpones waiting ``message``/``text``.
``message``
    Queued in order behind importants; never cuts another ``message``.  An arriving message
    cuts a speaking ``text``/``notification``/``progress`` and drops those waiting.
``text``
    Interrupts itself: only the newest text is said.  Waits behind importants and messages.
    An arriving text cuts a speaking ``text``/``notification``/``progress`` and drops those
    waiting.
``notification``
    Dropped on arrival when anything of another priority is speaking or waiting (or a
    progress is held).  A newer notification cuts an older one.
``progress``
    Like notification (drops waiting notifications, cuts a speaking one), except that
    progress messages do not cut each other: one arriving while something is speaking or
    waiting is *held* as the last of its series, replacing an older held one, and is spoken
    once nothing else is queued.  So the final "100 %" of a series is always heard.

The owner (the player) holds a lock around every call; this module only decides.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class Priority(enum.StrEnum):
    IMPORTANT = "important"
    MESSAGE = "message"
    TEXT = "text"
    NOTIFICATION = "notification"
    PROGRESS = "progress"


# The order in which waiting messages are taken (speech-dispatcher's queue order).
ORDER: tuple[Priority, ...] = (
    Priority.IMPORTANT,
    Priority.MESSAGE,
    Priority.TEXT,
    Priority.NOTIFICATION,
    Priority.PROGRESS,
)
_CUT_BY_MESSAGE_OR_TEXT = frozenset({Priority.TEXT, Priority.NOTIFICATION, Priority.PROGRESS})
# The speaking priorities an arrival of each priority cuts (a notification: only when admitted).
_CUTS: dict[Priority, frozenset[Priority]] = {
    Priority.IMPORTANT: frozenset(ORDER) - {Priority.IMPORTANT},
    Priority.MESSAGE: _CUT_BY_MESSAGE_OR_TEXT,
    Priority.TEXT: _CUT_BY_MESSAGE_OR_TEXT,
    Priority.NOTIFICATION: frozenset({Priority.NOTIFICATION}),
    Priority.PROGRESS: frozenset({Priority.NOTIFICATION}),
}


@dataclass
class Admission(Generic[T]):
    """What one arrival decided.  The owner fades ``cut`` out and ends ``dropped``."""

    accepted: bool
    position: int
    """Items that will be spoken before this one (0 = next); -1 when not accepted."""
    cut: T | None = None
    """The speaking item this arrival interrupts (already no longer ``current``)."""
    dropped: list[T] = field(default_factory=list)
    """Waiting items this arrival removed."""
    held: bool = False
    """A progress message parked as the last of its series."""


class SpeechQueue(Generic[T]):
    """Waiting items per priority, plus the one speaking (``current``)."""

    def __init__(self) -> None:
        self._waiting: dict[Priority, deque[T]] = {p: deque() for p in ORDER}
        self._held: T | None = None
        self._current: T | None = None
        self._current_priority: Priority | None = None

    # --- inspection -------------------------------------------------------------------------

    @property
    def current(self) -> T | None:
        return self._current

    @property
    def current_priority(self) -> Priority | None:
        return self._current_priority if self._current is not None else None

    def __len__(self) -> int:
        return sum(len(q) for q in self._waiting.values()) + (self._held is not None)

    def waiting(self) -> Iterator[T]:
        """Waiting items in the order they will be spoken."""
        for p in ORDER:
            yield from self._waiting[p]
        if self._held is not None:
            yield self._held

    def position(self, item: T) -> int:
        for i, other in enumerate(self.waiting()):
            if other is item:
                return i
        return -1

    # --- arrival ----------------------------------------------------------------------------

    def cuts(self, priority: Priority | str) -> bool:
        """Whether an arrival of ``priority`` now would cut the speaking item (a question
        only: nothing changes)."""
        p = Priority(priority)
        if self.current_priority not in _CUTS[p]:
            return False
        return p is not Priority.NOTIFICATION or not self._others_waiting()

    def _others_waiting(self) -> bool:
        """Something other than a notification is waiting or held."""
        return self._held is not None or any(
            self._waiting[q] for q in ORDER if q is not Priority.NOTIFICATION
        )

    def submit(self, item: T, priority: Priority | str) -> Admission[T]:
        p = Priority(priority)
        speaking = self.current_priority
        cut_current = self.cuts(p)
        dropped: list[T] = []

        if p is Priority.IMPORTANT:
            dropped += self._drain(Priority.NOTIFICATION, Priority.PROGRESS)
        elif p in (Priority.MESSAGE, Priority.TEXT):
            drain = [Priority.NOTIFICATION, Priority.PROGRESS, Priority.TEXT]
            dropped += self._drain(*drain)
        elif p is Priority.NOTIFICATION:
            if (
                speaking is not None and speaking is not Priority.NOTIFICATION
            ) or self._others_waiting():
                return Admission(accepted=False, position=-1)
            dropped += self._drain(Priority.NOTIFICATION)
        else:  # progress
            dropped += self._drain(Priority.NOTIFICATION)
            busy = (speaking is not None and not cut_current) or any(
                self._waiting[q] for q in ORDER
            )
            if busy:
                if self._held is not None:
                    dropped.append(self._held)
                self._held = item
                cut = self._cut() if cut_current else None
                return Admission(
                    accepted=True, position=len(self) - 1, cut=cut, dropped=dropped, held=True
                )

        cut = self._cut() if cut_current else None
        self._waiting[p].append(item)
        return Admission(accepted=True, position=self.position(item), cut=cut, dropped=dropped)

    def _drain(self, *priorities: Priority) -> list[T]:
        out: list[T] = []
        for p in priorities:
            out.extend(self._waiting[p])
            self._waiting[p].clear()
        return out

    def _cut(self) -> T | None:
        item, self._current, self._current_priority = self._current, None, None
        return item

    # --- the speaking side ------------------------------------------------------------------

    def next(self) -> T | None:
        """Make the first waiting item the speaking one (call when nothing is speaking)."""
        if self._current is not None:
            return self._current
        for p in ORDER:
            if self._waiting[p]:
                self._current, self._current_priority = self._waiting[p].popleft(), p
                return self._current
        if self._held is not None:
            self._current, self._current_priority = self._held, Priority.PROGRESS
            self._held = None
        return self._current

    def finished(self, item: T) -> None:
        """The speaking item ended by itself."""
        if self._current is item:
            self._cut()

    def cut_current(self) -> T | None:
        """Stop treating the speaking item as speaking (the owner fades it out)."""
        return self._cut()

    # --- removal ----------------------------------------------------------------------------

    def remove(self, item: T) -> bool:
        """Take a waiting (not speaking) item out; False if it is not waiting."""
        if self._held is item:
            self._held = None
            return True
        for q in self._waiting.values():
            for i, other in enumerate(q):
                if other is item:
                    del q[i]
                    return True
        return False

    def remove_where(self, pred: Callable[[T], bool]) -> list[T]:
        """Take out every waiting item matching ``pred``."""
        out: list[T] = []
        for p in ORDER:
            keep = [x for x in self._waiting[p] if not pred(x)]
            out.extend(x for x in self._waiting[p] if pred(x))
            self._waiting[p] = deque(keep)
        if self._held is not None and pred(self._held):
            out.append(self._held)
            self._held = None
        return out

    def clear(self) -> list[T]:
        """Empty the queue; returns the waiting items and the speaking one (last)."""
        out = self.remove_where(lambda _x: True)
        cur = self._cut()
        if cur is not None:
            out.append(cur)
        return out
