"""Viseme timings (``visemes``): each phoneme's mouth shape, where it sounds in the output.

The source is word timings' (:mod:`appliance.core.wordtimes`): the model's durations,
read through the same id → output-ms mapping (:data:`~appliance.core.wordtimes.IdTime`,
which holds speed, prosody, SSML breaks, clause pauses and the quick and eager starts'
joins, with the same choice of which words each side of a join times), so visemes follow
every join exactly as words do.  Inside each spoken word (espeak's: from the pad before
its first sounding id to its last, :func:`~appliance.core.wordtimes.spoken_spans`) each
id starts its viseme (:mod:`appliance.text.visemes`: pads and stress marks start the
phoneme after them, length marks and diacritics lengthen the one before); from a word's
last sounding id to the next word's first is ``sil`` (word gaps, punctuation, pauses).
No written word is needed: visemes alone cost no word alignment.

A :class:`VisemeTrack` keeps, per placed clause (or side of a join), a generator of its
changes of shape, and runs them only as far as the chunk being sent reaches: a first
chunk pays for its own ids, not its clause's (a Python step of ~1 µs each).  Each chunk
takes the track over exactly its own span (:meth:`VisemeTrack.take`), so a chunk's
visemes tile its audio by construction, and a request's add up to its audio length.

Thread: the event loop (the timeline's).  Bounds: the sources held are the clauses placed
and not yet played through (one, or two around a join); the changes run ahead of the
chunk sent by at most one; the final chunk drops what is left.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator

from appliance.core.wordtimes import IdTime, WrittenWord, spoken_spans
from appliance.speech import IntArray, Viseme
from appliance.text.phonemize import IdKinds
from appliance.text.visemes import NEXT, PREVIOUS, SIL, VisemeTable

Keep = Callable[[WrittenWord], bool]
"""Which spoken words a placement takes (a join's side; as for written words)."""


class VisemeTrack:
    """One request's viseme changes, placed clause by clause and taken by its chunks."""

    def __init__(self, table: VisemeTable, kinds: IdKinds) -> None:
        """``table``, ``kinds``: the voice's (its phonemizer's)."""
        self._table = table
        self._kinds = kinds
        self._sources: collections.deque[Iterator[tuple[float, int]]] = collections.deque()
        """Each placement's changes, made as they are needed, in output order."""
        self._changes: collections.deque[tuple[float, int]] = collections.deque()
        """(output ms, viseme) where the shape changes, in order, made and not yet taken."""
        self._last = SIL
        """The shape after the last change made (equal ones are not queued)."""
        self._current = SIL
        """The shape at the end of the last chunk taken."""

    def place(self, ids: IntArray, at: IdTime, keep: Keep | None = None) -> None:
        """The shapes of a clause's spoken words (those ``keep`` takes), timed by ``at``."""
        self._sources.append(self._shapes(ids, at, keep))

    def _shapes(self, ids: IntArray, at: IdTime, keep: Keep | None) -> Iterator[tuple[float, int]]:
        """The changes of shape of the spoken words, in order, ``sil`` after each one."""
        listed = ids.tolist()
        codes = self._table.of_ids(listed)
        for start, end in spoken_spans(self._kinds.string(listed)):
            if keep is not None and not keep(WrittenWord((0, 0), start, end)):
                continue
            waiting: float | None = None  # a pad or stress mark's start: the next phoneme's
            for p in range(start, end):
                code = codes[p]
                if code == NEXT:
                    if waiting is None:
                        waiting = at(p, True)
                elif code != PREVIOUS:
                    yield (at(p, True) if waiting is None else waiting), code
                    waiting = None
            yield at(end, False), SIL

    def _run(self, end_ms: float) -> None:
        """Make changes until one lies at or past ``end_ms`` (or none are left to make)."""
        sources, changes = self._sources, self._changes
        while sources and (not changes or changes[-1][0] < end_ms):
            made = next(sources[0], None)
            if made is None:
                sources.popleft()
            else:
                self._change(*made)

    def _change(self, ms: float, viseme: int) -> None:
        changes = self._changes
        if changes and ms <= changes[-1][0]:
            # At the same time (or, across a join, a frame before) as the last change:
            # that one lasted nothing, this one replaces it.
            changes.pop()
            self._last = changes[-1][1] if changes else self._current
            ms = max(ms, changes[-1][0]) if changes else ms
        if viseme != self._last:
            changes.append((ms, viseme))
            self._last = viseme

    def take(self, start_ms: float, end_ms: float, everything: bool) -> tuple[Viseme, ...]:
        """The shapes over ``[start_ms, end_ms)``, tiling it (a change placed before the
        start counts from the start; ``everything``: the request's last chunk, the rest
        of the track is dropped)."""
        self._run(end_ms)
        out: list[Viseme] = []
        shape, t = self._current, start_ms
        changes = self._changes
        # A change within a microsecond of the end is the next chunk's (chunk ends and
        # frames come through different float paths).
        while changes and changes[0][0] < end_ms - 1e-3:
            ms, viseme = changes.popleft()
            if ms > t + 1e-3 and viseme != shape:
                out.append(Viseme(shape, t, ms - t))
                t = ms
            shape = viseme
        if end_ms > t or not out:
            out.append(Viseme(shape, t, max(0.0, end_ms - t)))
        self._current = shape
        if everything:
            changes.clear()
            self._sources.clear()
            self._current = self._last = SIL
        return tuple(out)
