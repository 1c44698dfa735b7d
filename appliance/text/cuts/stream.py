"""Where a text that streams in may end a segment: the plain rule, pure and table-tested.

:func:`release_point` says how many leading characters of the text not yet spoken may be
spoken now (the meaning of each cut: :mod:`appliance.text.cuts`); :func:`sentence_cuts`
lists its sentence cuts in a whole text (the head-first cut reads them); :func:`safe_cut`,
:func:`word_cut` and :func:`draftable` are the eager start's and Markdown's checks.

Bounds: every rule reads the pending text once (linear in its length); the sentence cuts
of the last four texts asked about are remembered (:data:`_recent`, a few texts of at most
``limits.max_text_chars``), so a text feed asking again after each append or release
rescans only :data:`CONTEXT` characters either side of what changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.text.cuts.clause import long_sentence_cut
from appliance.text.frontend import clean, ends_finally, is_sentence_end_at, split_sentences

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


@dataclass(frozen=True)
class Occasion:
    """Why the text feed asks what to release now."""

    first: bool = False
    """Nothing released yet: a first segment may end at a clause mark after
    :attr:`SegmentRule.first_chars`."""
    idle: bool = False
    """No new text for :attr:`SegmentRule.idle_ms`: up to the last clause mark, else word."""
    low: bool = False
    """The listener is running out of audio: up to the last clause mark."""
    flush: bool = False
    """The writer asked for everything written so far."""


ON_TEXT = Occasion()
"""Text came, nothing else: whole sentences (or a cut of an over-long one)."""


def _sentence_cut(pending: str) -> int:
    """End (in ``pending``) of the last whole sentence that is followed by whitespace."""
    cuts = _known_cuts(pending)
    return cuts[-1] if cuts else 0


@dataclass(frozen=True)
class _Scan:
    text: str
    cuts: tuple[int, ...]
    """Every sentence cut in ``text``, ascending."""


CONTEXT = 128
"""Characters either side of a cut that its decision may read (the abbreviation before it,
the capital after it; for a Markdown block boundary, the next line's first characters),
with room to spare."""
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
            head = _scan_cuts(pending[: 2 * CONTEXT], 0)  # decided again without the left
            cuts = tuple(c for c in head if c < CONTEXT)
            cuts += tuple(c - k for c in scan.cuts if c - k >= CONTEXT)
            break
        if len(scan.text) > 2 * CONTEXT and pending.startswith(scan.text):  # an append
            keep = len(scan.text) - CONTEXT
            cuts = tuple(c for c in scan.cuts if c < keep)
            cuts += tuple(c for c in _scan_cuts(pending, keep - CONTEXT) if c >= keep)
            break
    if cuts is None:
        cuts = _scan_cuts(pending, 0)
    _recent = (_Scan(pending, cuts), *_recent[:3])
    return cuts


def sentence_cuts(text: str) -> tuple[int, ...]:
    """Every place in ``text`` where :func:`release_point` ends a segment at a sentence end
    (just after it, before the whitespace that follows it), ascending.  A cut is decided by
    the text up to :data:`CONTEXT` characters after it: a prefix that long past a cut gives
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


def release_point(pending: str, rule: SegmentRule, why: Occasion = ON_TEXT) -> int:
    """How many leading characters of ``pending`` (text not yet spoken) to speak now."""
    if why.flush:
        return len(pending)
    cut = _sentence_cut(pending)
    if cut:
        return cut
    final = ends_finally(pending)
    if final:
        return final
    if why.first:
        for m in _CLAUSE_MARK.finditer(pending):
            if m.end() >= rule.first_chars:
                return m.end()
    if why.idle or why.low:
        marks = [m.end() for m in _CLAUSE_MARK.finditer(pending)]
        if marks:
            return marks[-1]
    if why.idle:
        space = max(pending.rfind(" "), pending.rfind("\n"))
        return space if space > 0 else 0
    if len(pending) > rule.max_chars:
        return long_sentence_cut(pending, rule.max_chars)
    return 0


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
