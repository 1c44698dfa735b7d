"""What a voice says for a text, word by word (the ``phonemes`` op, ``ttsctl phonemes``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from appliance.text.frontend import Clause
from appliance.text.phonemize import Phonemizer


def phoneme_report(clauses: Sequence[Clause], phonemizer: Phonemizer) -> list[dict[str, Any]]:
    """Each clause as the voice says it: its text, span, phonemes, and phonemes per word.

    Words are paired with espeak's words when every word is a plain one and the counts
    agree (the phonemes in context); otherwise each word is phonemized on its own.  A symbol
    is said as any number of words ("→" as two, "•" as none), so counts that agree around
    one put each word's phonemes under the next.  Raises ``bad_request`` for an IPA symbol
    the voice does not know.
    """
    out: list[dict[str, Any]] = []
    for c in clauses:
        phonemes = "".join(phonemizer.phonemes_with(c.text, c.phonemes))
        words = [(m.start(), m.end()) for m in re.finditer(r"\S+", c.text)]
        said = phonemes.split()
        plain = all(_PLAIN_WORD.fullmatch(c.text[a:b]) for a, b in words)
        if len(said) != len(words) or not plain:
            said = []
            for a, b in words:
                inside = [o for o in c.phonemes if a <= o.start and o.end <= b]
                shifted = [replace(o, start=o.start - a, end=o.end - a) for o in inside]
                said.append("".join(phonemizer.phonemes_with(c.text[a:b], shifted)))
        out.append(
            {
                "text": c.text,
                "span": list(c.span),
                "phonemes": phonemes,
                "words": [
                    {"text": c.text[a:b], "phonemes": p}
                    for (a, b), p in zip(words, said, strict=True)
                ],
            }
        )
    return out


# A word espeak says as one word: letters, digits and apostrophes, with the punctuation of
# running text around it.
_PLAIN_WORD = re.compile(r"[\"'(\[]*[^\W_](?:[\w'’]*[^\W_])?[\"')\].,;:!?]*")
