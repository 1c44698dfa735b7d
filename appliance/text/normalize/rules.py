"""Running an ordered list of regex rewrites over a ``MappedText``.

Shared by the language modules: each rule is one compiled pattern and a function that
returns the spoken form of a match (or ``None`` to leave that match as written).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from appliance.text.textmap import MappedText

Replacer = Callable[[re.Match[str]], str | None]
Rule = tuple[re.Pattern[str], Replacer]

_SENTENCE_FOLLOWS = re.compile(r"\s*$|\s+[\"“(]?[A-Z]")


def keep_period(m: re.Match[str]) -> str:
    """The period a match took (an abbreviation's, "a.m."'s) also ended the sentence: the
    spoken form keeps it ("." to append), else ""."""
    return "." if _SENTENCE_FOLLOWS.match(m.string, m.end()) else ""


def apply_rules(text: MappedText, rules: Sequence[Rule]) -> MappedText:
    """Apply each rule in order, one pass each; later rules see earlier rules' output."""
    for pattern, replace in rules:
        # Most rules match nothing in a given sentence; a search is far cheaper than
        # rebuilding the character map.
        if pattern.search(text.text) is not None:
            text = text.sub(pattern, replace)
    return text
