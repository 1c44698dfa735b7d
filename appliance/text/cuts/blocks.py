"""Where Markdown that streams in may end a segment: the block rule, pure and table-tested.

Each released segment is read on its own (:func:`appliance.text.frontend.prepare_markdown`),
so a segment ends only where the Markdown before it is complete and the Markdown after it
reads the same on its own.  :func:`markdown_release_point` is the rule, in the shape of
:func:`appliance.text.cuts.stream.release_point`:

- At the end of a line that ends a block: a heading's line, or a line followed by a blank
  line or by one that starts a block — ``#``, ``-``/``*``/``+``, ``1.``/``1)``, ``>``,
  ``|``, a fence, a rule — which is known from the first characters of the next line.  The
  segment boundary is put before the next line's indentation, so a nested list item read
  on its own is still a list item (not indented code).
- Inside a paragraph, where the plain rule cuts (a sentence end, the first segment's
  clause mark, idle, low water, the length cap), emphasis, strike and code delimiters
  counting as closing quotes (so "**Sure!**" ends a sentence), never inside an unclosed
  link, HTML tag or code span.  A sentence end that nothing can undo is released as it
  arrives, as in plain text.
- Headings, list items, quotes and table rows are released whole (at their line's end):
  cut inside, the rest would be read as a plain paragraph.  A line of one longer than the
  plain rule's ``max_chars`` is cut as the plain rule cuts it (the documented cost: the
  rest of that line is read as a paragraph).
- A fence is held until its closing line has arrived, a table until a line after it is not
  a row.  A fence that never closes and a table that never ends are spoken at ``finish``
  (or a ``flush``) — what whole-text Markdown does with them — bounded, as every text
  stream, by ``limits.max_text_chars`` and ``streaming.text_timeout_s``.

Every decision reads the pending text once, line by line: linear in its length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.text.cuts.clause import long_sentence_cut
from appliance.text.cuts.stream import ON_TEXT, Occasion, SegmentRule, release_point, safe_cut

# Delimiters read as closing quotes by the plain rule (same length: positions carry over).
_AS_QUOTES = str.maketrans({"*": '"', "_": '"', "~": '"', "`": '"'})
_DELIMITERS = frozenset("*_~`")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_BLOCK_START = re.compile(
    r"[ \t]*(?:#{1,6}(?:[ \t]|$)|[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|\||`{3}|~{3})"
)
_RULE_LINE = re.compile(r" {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_UNDECIDED = re.compile(r"[ \t]*(?:#{1,6}|[-*+]|\d{1,9}[.)]?|`{1,2}|~{1,2})?")
"""The start of a line too short to say whether it starts a block."""
_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
_ROW = re.compile(r"[ \t]*\|")
_NOT_ROW = re.compile(r"^(?![ \t]*\|)", re.M)


@dataclass(frozen=True)
class _Line:
    start: int
    end: int
    """Without its newline."""
    complete: bool


def _lines(text: str) -> list[_Line]:
    out: list[_Line] = []
    pos = 0
    while pos <= len(text):
        nl = text.find("\n", pos)
        if nl < 0:
            if pos < len(text):
                out.append(_Line(pos, len(text), False))
            break
        out.append(_Line(pos, nl, True))
        pos = nl + 1
    return out


def _starts_block(text: str, complete: bool) -> bool | None:
    """Does a line starting with ``text`` start a block?  None: too little to tell."""
    if _BLOCK_START.match(text) or (complete and _RULE_LINE.match(text)):
        return True
    if complete:
        return not text.strip()
    return None if _UNDECIDED.fullmatch(text) else False


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


@dataclass
class _Scan:
    """The pending text's complete blocks: where they end, and what is held."""

    boundaries: list[int]
    held: int | None
    """Start of an open fence or table (nothing from there is released); None: none."""


def _held_at_start(pending: str) -> _Scan | None:
    """A fence or a table at the start of ``pending``, found with one regular-expression
    search (not line by line): held text is asked about again after every append."""
    fence = _FENCE.match(pending)
    if fence:
        opener = fence.group(1)
        first_nl = pending.find("\n")
        close = (
            re.compile(rf"^ {{0,3}}{re.escape(opener[0])}{{{len(opener)},}}[ \t]*\n", re.M).search(
                pending, first_nl + 1
            )
            if first_nl >= 0
            else None
        )
        return _Scan([close.end()], None) if close else _Scan([], 0)
    if _ROW.match(pending):
        after = _NOT_ROW.search(pending)
        if after is None or after.start() == len(pending):
            return _Scan([], 0)
        rest = pending[after.start() :].split("\n", 1)
        if len(rest) == 1 and not rest[0].strip():
            return _Scan([], 0)  # may still become a row
        return _Scan([after.start() + _indent(rest[0])], None)
    return None


def _scan(pending: str) -> _Scan:
    held = _held_at_start(pending)
    if held is not None:
        return held
    lines = _lines(pending)
    boundaries: list[int] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        text = pending[line.start : line.end]
        fence = _FENCE.match(text)
        if fence:
            close = _closing_fence(pending, lines, k, fence.group(1))
            if close is None:
                return _Scan(boundaries, line.start)
            k = close + 1
            boundaries.append(lines[close].end + 1)
            continue
        if _ROW.match(text):
            j = k
            while j < len(lines) and lines[j].complete and _ROW.match(_text(pending, lines[j])):
                j += 1
            nxt = lines[j] if j < len(lines) else None
            if nxt is None or _ROW.match(_text(pending, nxt)):
                return _Scan(boundaries, line.start)
            if not nxt.complete and not _text(pending, nxt).strip():
                return _Scan(boundaries, line.start)  # may still become a row
            boundaries.append(nxt.start + _indent(_text(pending, nxt)))
            k = j
            continue
        if not line.complete:
            break
        nxt = lines[k + 1] if k + 1 < len(lines) else None
        if _HEADING.match(text) or not text.strip():
            boundaries.append(line.end + 1 + (_indent(_text(pending, nxt)) if nxt else 0))
        elif nxt is not None and _starts_block(_text(pending, nxt), nxt.complete):
            boundaries.append(nxt.start + _indent(_text(pending, nxt)))
        k += 1
    return _Scan(boundaries, None)


def block_boundaries(text: str) -> list[int]:
    """Every place in ``text`` where :func:`markdown_release_point` may end a segment at the
    end of a complete block (never inside a fence or a table), ascending.  A boundary is
    decided by the line after it (its first characters)."""
    out: list[int] = []
    pos = 0
    while pos < len(text):
        # A fence or table at the start yields only the boundary after it: ask again there.
        found = [pos + b for b in _scan(text[pos:]).boundaries if b > 0]
        if not found:
            break
        out.extend(found)
        pos = found[-1]
    return out


def _text(pending: str, line: _Line) -> str:
    return pending[line.start : line.end]


def _closing_fence(pending: str, lines: list[_Line], k: int, opener: str) -> int | None:
    """The complete line that closes the fence opened at line ``k``; None: not yet."""
    for j in range(k + 1, len(lines)):
        if not lines[j].complete:
            return None
        text = _text(pending, lines[j]).strip()
        if text and set(text) == {opener[0]} and len(text) >= len(opener):
            return j
    return None


def _paragraph(first_line: str) -> bool:
    """Is a block that starts with this line a paragraph (sentences may be cut in it)?"""
    return not _BLOCK_START.match(first_line) and not _FENCE.match(first_line)


def markdown_release_point(pending: str, rule: SegmentRule, why: Occasion = ON_TEXT) -> int:
    """How many leading characters of ``pending`` (Markdown not yet spoken) to speak now.

    ``pending`` always starts where a segment may start (a block's start, or inside a
    paragraph after a sentence): the text feed releases nothing else."""
    if why.flush:
        return len(pending)
    scan = _scan(pending)
    done = [b for b in scan.boundaries if 0 < b <= len(pending)]
    if done:
        return max(done)  # complete blocks: the rest is asked about again
    block = pending if scan.held is None else pending[: scan.held]
    if not block:
        return 0
    first_line = block.split("\n", 1)[0]
    if not _paragraph(first_line):
        return long_sentence_cut(block, rule.max_chars) if len(block) > rule.max_chars else 0
    n = release_point(block.translate(_AS_QUOTES), rule, why)
    if n == len(pending) and pending[-1] in _DELIMITERS:
        return 0  # "**Sure!*": the closing run may not be whole yet
    return n if n > 0 and safe_cut(pending[:n]) else 0
