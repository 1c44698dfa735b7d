"""Where a long one-shot text is cut into a head and a tail prepared one after the other.

The service prepares the head first, so that a long text's first audio waits for the
frontend of its first sentences only (:mod:`appliance.core.headfirst`).  The one invariant,
which tests/core/test_headfirst.py holds over many texts: the clauses of the head then the
tail are exactly the whole text's.  So a text is cut only where a text stream's release
rule ends a segment (:func:`appliance.text.cuts.stream.sentence_cuts`, a sentence end
before whitespace; :func:`appliance.text.cuts.blocks.block_boundaries`, a complete block),
and of those only where nothing before the cut reads what comes after it:

- plain text: the first sentence end at or after :data:`HEAD_CHARS` characters, with
  something to say after it;
- Markdown: the start of a line after a blank line, at the left margin, that starts a
  paragraph, heading, list item, quote or table row with a word (a tail that began with
  only a rule or code would drop the pause the whole text gives the head's last clause).

Never cut (prepared whole, as before): a text under :data:`HEAD_MIN_CHARS` characters
(its frontend takes a millisecond) or over ``max_chars`` (refused whole); SSML (parsed as
one document); a surrogate (refused whole); a letter of a script the voice does not read
(the refusal is decided on the whole text); Markdown with a link reference definition
(``]:`` anywhere: it names links anywhere) or a line starting with ``<`` before the cut (an
HTML block may run on past a blank line).

Bounds: only the first :data:`HEAD_SCAN` characters are read to find the cut, so finding it
costs the same for any text; it runs in the frontend executor with the head's frontend.
"""

from __future__ import annotations

import re

from appliance.text.cuts.blocks import block_boundaries
from appliance.text.cuts.stream import CONTEXT, sentence_cuts
from appliance.text.frontend import has_foreign_letters

HEAD_MIN_CHARS = 400
"""Texts shorter than this are prepared whole: the tail would save under a millisecond."""
HEAD_CHARS = 200
"""The head ends at the first cut at or after this many characters: a few sentences, whose
audio plays while the tail is prepared (~70 ms for 20 000 characters)."""
HEAD_SCAN = 1500
"""Characters read to find the cut; none there: the text is prepared whole."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_SAID = re.compile(r"[^\W_]")
_WORDY_LINE = re.compile(
    r"(?:#{1,6}[ \t]+|[-*+][ \t]+|\d{1,9}[.)][ \t]+|>[ \t]*|\|[ \t]*)?(?:[*_]{1,3})?[^\W_]"
)
"""A block at the left margin that starts with a word (after its marker and emphasis)."""
_HTML_LINE = re.compile(r"^ {0,3}<", re.M)


def head_cut(text: str, text_format: str, language: str, max_chars: int) -> int:
    """Where to cut ``text`` into a head and a tail prepared one after the other; 0: not."""
    if not HEAD_MIN_CHARS <= len(text) <= max_chars or text_format not in ("text", "markdown"):
        return 0
    if _SURROGATE.search(text) or has_foreign_letters(text, language):
        return 0
    # A short read first (most texts have a cut within it), the whole HEAD_SCAN if not; a
    # cut is taken only CONTEXT characters inside what was read (or at the text's end).
    for size in (HEAD_CHARS + 2 * CONTEXT, HEAD_SCAN):
        scanned = text[:size]
        last = len(text) if len(scanned) == len(text) else len(scanned) - CONTEXT
        if text_format == "markdown":
            cuts = _markdown_cuts(text, scanned)
        else:
            cuts = list(sentence_cuts(scanned))
        cut = next((c for c in cuts if HEAD_CHARS <= c <= last), 0)
        if cut or len(scanned) == len(text):
            # A tail with nothing to say would be a head that did not know it was last.
            return cut if _SAID.search(text, cut) else 0
    return 0


def _markdown_cuts(text: str, scanned: str) -> list[int]:
    if "]:" in text:
        return []
    html = _HTML_LINE.search(scanned)
    stop = html.start() if html else len(scanned)
    return [
        b
        for b in block_boundaries(scanned)
        if b <= stop and _after_blank(scanned, b) and _WORDY_LINE.match(text, b)
    ]


def _after_blank(text: str, pos: int) -> bool:
    """Is ``pos`` the start of a line that follows a blank line?"""
    if pos < 2 or text[pos - 1] != "\n":
        return False
    before = text.rfind("\n", 0, pos - 1)
    return before >= 0 and not text[before + 1 : pos - 1].strip()
