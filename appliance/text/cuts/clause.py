"""Where a sentence too long to encode whole is cut into clauses: pure, no text state.

:func:`long_sentence_cut` and :func:`latency_cut` are what
:func:`appliance.text.frontend.split_clauses` and the stream rules
(:mod:`appliance.text.cuts.stream`) call; the meaning of each cut:
:mod:`appliance.text.cuts`.  This module imports nothing of the frontend (the frontend
imports it).

Bounds: each cut reads at most ``limit + 1`` characters of its text, once.
"""

from __future__ import annotations

import re

_CLAUSE_BREAK = re.compile(r"[,;:](?=\s)|\s[-–—]\s")
_STRONG_BREAK = re.compile(r"[;:](?=\s)|\s[-–—]\s")
_COMMA_BREAK = re.compile(r",(?=\s)")


def long_sentence_cut(text: str, limit: int) -> int:
    """Where a sentence over ``limit`` characters is cut: see
    :func:`appliance.text.frontend.split_clauses`."""
    for pattern in (_STRONG_BREAK, _COMMA_BREAK):
        ends = [m.end() for m in pattern.finditer(text, 0, limit + 1)]
        if ends:
            return ends[-1]
    cut = text.rfind(" ", 1, limit + 1)
    return cut if cut > 0 else limit


def latency_cut(text: str, limit: int) -> int:
    """The ``first_clause_chars`` cut: the last clause mark past a third of ``limit``, else
    the last space there, else ``limit``."""
    cut = -1
    for m in _CLAUSE_BREAK.finditer(text, 0, limit + 1):
        if m.end() >= limit // 3:
            cut = m.end()
    if cut < 0:
        cut = text.rfind(" ", limit // 3, limit + 1)
    return cut if cut > 0 else limit
