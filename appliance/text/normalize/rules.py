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


def apply_rules(text: MappedText, rules: Sequence[Rule]) -> MappedText:
    """Apply each rule in order, one pass each; later rules see earlier rules' output."""
    for pattern, replace in rules:
        # Most rules match nothing in a given sentence; a search is far cheaper than
        # rebuilding the character map.
        if pattern.search(text.text) is not None:
            text = text.sub(pattern, replace)
    return text
