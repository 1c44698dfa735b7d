"""The word-timing passes that issue 29 made fast, held to what they replaced: spoken
words from the id tables (against the per-id loop, copied here), the id tables themselves
(appliance.core.wordtimes, appliance.text.phonemize.IdKinds)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from appliance.core.wordtimes import (
    spoken_words,
    word_sizes,
    written_words,
)
from appliance.text.phonemize import IdKinds

SPACE, PAD, COMMA, END = 3, 0, 8, 2
SILENT = {SPACE, PAD, COMMA, END}
KINDS = IdKinds.of(64, space={SPACE}, silent=SILENT, pad={PAD})

# -- the reference: spoken_words as it was before issue 29 (commit 53e329f)


IdTest = Callable[[int], bool]


def reference_spoken_words(
    ids: Sequence[int], is_space: IdTest, is_sound: IdTest, is_pad: IdTest
) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    lo = hi = -1
    gap = -1
    for k, i in enumerate(ids):
        if is_space(i):
            if lo >= 0:
                out.append((lo, hi))
            lo, gap = -1, k
        elif is_sound(i):
            if lo < 0:
                lo = k - 1 if k - 1 > gap and is_pad(ids[k - 1]) else k
            hi = k + 1
    if lo >= 0:
        out.append((lo, hi))
    return out


# -- spoken words and their sizes


def test_id_tables() -> None:
    assert KINDS.space.tolist()[:9] == [i == SPACE for i in range(9)]
    assert KINDS.pad.tolist()[:9] == [i == PAD for i in range(9)]
    assert KINDS.sound.tolist()[:10] == [i not in SILENT for i in range(10)]
    # a gap or a pad never sounds, even if the silent ids leave it out
    kinds = IdKinds.of(8, space={1}, silent=set(), pad={2})
    assert kinds.sound.tolist() == [True, False, False, True, True, True, True, True]
    assert not kinds.sound.flags.writeable
    with pytest.raises(ValueError):
        IdKinds.of(8, space={1}, silent=set(), pad={1})


def random_ids(rng: random.Random) -> list[int]:
    """Ids where gaps, pads, punctuation and sounds come in any order."""
    pool = [SPACE, PAD, PAD, COMMA, END, 20, 21, 22, 30]
    return [rng.choice(pool) for _ in range(rng.randint(0, 40))]


def test_spoken_words_are_the_per_id_loop_they_replaced() -> None:
    def is_space(i: int) -> bool:
        return i == SPACE

    def is_sound(i: int) -> bool:
        return i not in SILENT

    def is_pad(i: int) -> bool:
        return i == PAD

    rng = random.Random(29)
    for _ in range(3000):
        ids = random_ids(rng)
        want = reference_spoken_words(ids, is_space, is_sound, is_pad)
        assert spoken_words(ids, KINDS) == want, ids
        assert spoken_words(np.asarray(ids, dtype=np.int64), KINDS) == want, ids


@pytest.mark.parametrize(
    ("ids", "sizes"),
    [
        ([PAD, 20, 21, PAD, SPACE, PAD, 22, PAD, COMMA], [2, 1]),
        ([SPACE, 20, SPACE, SPACE, PAD, 21, 22, 23, END], [1, 3]),
        ([PAD, SPACE, COMMA], []),
    ],
)
def test_word_sizes_count_sounding_ids(ids: list[int], sizes: list[int]) -> None:
    sounding = np.flatnonzero(KINDS.sound[np.asarray(ids)])
    assert word_sizes(sounding, spoken_words(ids, KINDS)) == sizes


@pytest.mark.parametrize(
    ("text", "voiced"),
    [
        ("one two", ["one", "two"]),
        ("— x² _ Ⅻ", ["x²", "Ⅻ"]),  # superscript and Roman numerals are alphanumeric
        ("a_b __ é\u00a0٣ 3:45", ["a_b", "é", "٣", "3:45"]),  # NBSP splits; "_" says nothing
        ("one\u3000two\u2028three", ["one", "two", "three"]),  # other Unicode whitespace
    ],
)
def test_tokens_are_whitespace_separated_with_a_letter_or_digit(
    text: str, voiced: list[str]
) -> None:
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    ids: list[int] = []
    for k in range(len(voiced)):
        ids += [SPACE, PAD, 20 + k, PAD]
    words = written_words(text, spans, ids, spoken_words(ids, KINDS), KINDS)
    assert [text[w.span[0] : w.span[1]] for w in words] == voiced
