"""The word-timing passes that issue 29 made fast, held to what they replaced (copied
here): the alignment of the text's tokens to espeak's words (against the whole-table
programme, and its first words, found before the rest, against one call over the whole
clause), spoken words from the id tables (against the per-id loop), and the id tables
themselves (appliance.core.wordtimes, appliance.text.phonemize.IdKinds)."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from appliance.core.wordtimes import (
    MAX_JOIN,
    WordWork,
    _proportional,
    _spoken,
    _voiced,
    align,
    reachable,
    spoken_words,
    written_words,
)
from appliance.text.phonemize import ID_PAD, ID_SILENT, ID_SOUND, ID_SPACE, IdKinds

SPACE, PAD, COMMA, END = 3, 0, 8, 2
SILENT = {SPACE, PAD, COMMA, END}
KINDS = IdKinds.of(64, space={SPACE}, silent=SILENT, pad={PAD})

# -- the reference: align and spoken_words as they were before issue 29 (commit 53e329f)

_OLD_STEPS = (
    *((a, 1, 0.0 if a == 1 else 0.5) for a in range(1, MAX_JOIN + 1)),
    *((1, b, 0.5) for b in range(2, MAX_JOIN + 1)),
)


def reference_align(token_sizes: Sequence[int], word_sizes: Sequence[int]) -> list[tuple[int, int]]:
    n, m = len(token_sizes), len(word_sizes)
    if n == 0 or m == 0:
        return []
    tok = [0, *itertools.accumulate(token_sizes)]
    wrd = [0, *itertools.accumulate(word_sizes)]
    low, high = min(0, m - n) - 1, max(0, m - n) + 1
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[int, int]]] = [[(0, 0)] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    for i in range(n + 1):
        row, ti = cost[i], tok[i]
        for j in range(max(0, i + low), min(m, i + high) + 1):
            here = row[j]
            if here == inf:
                continue
            wj = wrd[j]
            for a, b, penalty in _OLD_STEPS:
                ia, jb = i + a, j + b
                if ia > n or jb > m:
                    continue
                c = here + abs(tok[ia] - ti - wrd[jb] + wj) + penalty
                if c < cost[ia][jb]:
                    cost[ia][jb] = c
                    back[ia][jb] = (i, j)
    if cost[n][m] == inf:
        return _proportional(n, m)
    out: list[tuple[int, int]] = [(0, 0)] * n
    i, j = n, m
    while i > 0:
        pi, pj = back[i][j]
        for t in range(pi, i):
            out[t] = (pj, j - 1)
        i, j = pi, pj
    return out


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


# -- the alignment


@pytest.mark.parametrize(
    ("tokens", "words", "want"),
    [
        # one to one
        ([3, 5, 2], [3, 5, 2], [(0, 0), (1, 1), (2, 2)]),
        # "in the" said as one word, then "that the" (joins of two)
        ([4, 2, 2, 6, 3, 2], [4, 4, 6, 5], [(0, 0), (1, 1), (1, 1), (2, 2), (3, 3), (3, 3)]),
        # three tokens as one word
        ([5, 1, 2, 2, 4], [5, 5, 4], [(0, 0), (1, 1), (1, 1), (1, 1), (2, 2)]),
        # one token said as two words, and as three
        ([4, 8, 3], [4, 5, 3, 3], [(0, 0), (1, 2), (3, 3)]),
        ([9, 2], [3, 3, 3, 2], [(0, 2), (3, 3)]),
        # sizes that never add up again: "a" alone is eɪ (3 ids), in context ə (1 id)
        ([2, 7, 3, 6, 3], [2, 7, 1, 6, 3], [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]),
        # ... and with a join: "had been a big" → [hadbin] [ə] [bɪg]
        ([3, 3, 3, 3], [6, 1, 3], [(0, 0), (0, 0), (1, 1), (2, 2)]),
        # a join before a split: each in place, the net count is 0
        ([3, 2, 2, 5, 8, 4], [3, 4, 5, 4, 4, 4], [(0, 0), (1, 1), (1, 1), (2, 2), (3, 4), (5, 5)]),
        # more joins than MAX_JOIN could cover: in proportion
        ([1] * 7, [7], [(0, 0)] * 7),
        ([], [3], []),
        ([3], [], []),
    ],
)
def test_align(tokens: list[int], words: list[int], want: list[tuple[int, int]]) -> None:
    assert align(tokens, words) == want
    assert reference_align(tokens, words) == want


def espeak_like(rng: random.Random) -> tuple[list[int], list[int]]:
    """Token sizes and the words espeak might make of them: joins of two or three, splits
    into two or three, and a word now and then one id longer or shorter in context."""
    tokens = [rng.randint(1, 10) for _ in range(rng.randint(1, 60))]
    words: list[int] = []
    i = 0
    while i < len(tokens):
        r = rng.random()
        k = min(rng.choice((2, 2, 3)), len(tokens) - i)
        if r < 0.12 and k > 1:
            words.append(sum(tokens[i : i + k]))
            i += k
            continue
        if r < 0.16 and tokens[i] > 1:
            cuts = sorted(rng.sample(range(1, tokens[i]), min(k, tokens[i]) - 1))
            words.extend(b - a for a, b in itertools.pairwise([0, *cuts, tokens[i]]))
        else:
            words.append(tokens[i])
        i += 1
    noise = rng.choice((0.0, 0.05, 0.2))
    words = [max(1, w + rng.choice((-1, 1))) if rng.random() < noise else w for w in words]
    return tokens, words


def any_sizes(rng: random.Random) -> tuple[list[int], list[int]]:
    """Small sizes, counts anything from 0 to 14: ties, unreachable ends, wide bands."""
    return (
        [rng.randint(1, 4) for _ in range(rng.randint(0, 14))],
        [rng.randint(1, 4) for _ in range(rng.randint(0, 14))],
    )


@pytest.mark.parametrize("make", [espeak_like, any_sizes])
def test_align_is_the_whole_table_programme_it_replaced(
    make: Callable[[random.Random], tuple[list[int], list[int]]],
) -> None:
    rng = random.Random(29)
    for _ in range(3000):
        tokens, words = make(rng)
        assert align(tokens, words) == reference_align(tokens, words), (tokens, words)


def reference_reaches(n: int, m: int) -> bool:
    """Whether the old programme's steps reach (n, m) within its band (a search)."""
    low, high = min(0, m - n) - 1, max(0, m - n) + 1
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        i, j = todo.pop()
        for a, b, _ in _OLD_STEPS:
            cell = (i + a, j + b)
            if cell not in seen and cell[0] <= n and cell[1] <= m and low <= j + b - i - a <= high:
                seen.add(cell)
                todo.append(cell)
    return n > 0 and m > 0 and (n, m) in seen


def test_reachable_is_where_the_programme_can_end() -> None:
    for n in range(0, 16):
        for m in range(0, 16):
            assert reachable(n, m) == reference_reaches(n, m), (n, m)


def clause_of(tokens: list[int], words: list[int]) -> tuple[str, list[tuple[int, int]], list[int]]:
    """A clause of tokens "t0 t1 ..." and its ids: each spoken word a gap, a pad and its
    sounding ids (sizes as ``words``)."""
    text = " ".join(f"t{k}" for k in range(len(tokens)))
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    ids: list[int] = []
    for size in words:
        ids += [SPACE, PAD, *([20] * size)]
    return text, spans, ids


@pytest.mark.parametrize("make", [espeak_like, any_sizes])
def test_the_first_words_are_the_whole_clauses(
    make: Callable[[random.Random], tuple[list[int], list[int]]],
) -> None:
    """WordWork.before gives, before the first packet, the words that start before a
    position exactly as the whole clause's alignment has them (and all of them)."""
    rng = random.Random(290)
    for _ in range(1500):
        tokens, words = make(rng)
        text, spans, ids = clause_of(tokens, words)

        def size(token: str, tokens: list[int] = tokens) -> int:
            return tokens[int(token[1:])]

        whole = written_words(text, spans, ids, KINDS, size)
        for position in {0, rng.randint(0, len(ids)), len(ids)}:
            work = WordWork.of(text, spans, ids, KINDS, size)
            first = work.before(position)
            assert first == whole[: len(first)], (tokens, words, position)
            assert all(w in first for w in whole if w.start < position), (tokens, words, position)
            assert work.all() == whole


# -- spoken words and their sizes


def test_id_tables() -> None:
    assert KINDS.space.tolist()[:9] == [i == SPACE for i in range(9)]
    assert KINDS.pad.tolist()[:9] == [i == PAD for i in range(9)]
    assert KINDS.sound.tolist()[:10] == [i not in SILENT for i in range(10)]
    codes = {SPACE: ID_SPACE, PAD: ID_PAD, COMMA: ID_SILENT, END: ID_SILENT}
    assert KINDS.codes[:10] == tuple(codes.get(i, ID_SOUND) for i in range(10))
    # a gap or a pad never sounds, even if the silent ids leave it out
    kinds = IdKinds.of(8, space={1}, silent=set(), pad={2})
    assert kinds.sound.tolist() == [True, False, False, True, True, True, True, True]
    assert kinds.codes == (ID_SOUND, ID_SPACE, ID_PAD, *[ID_SOUND] * 5)
    assert not kinds.sound.flags.writeable
    with pytest.raises(ValueError):
        IdKinds.of(8, space={1}, silent=set(), pad={1})
    # A clause's kinds a byte each, whether its ids fit in a byte (a translate table) or not
    for size in (8, 300):
        kinds = IdKinds.of(size, space={1}, silent={3}, pad={2})
        ids = [0, 1, 2, 3, 7, size - 1]
        assert kinds.string(ids) == b"".join(kinds.codes[i] for i in ids) == b"s p.ss"


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
        sizes = [sum(is_sound(i) for i in ids[a:b]) for a, b in want]
        assert _spoken(ids, KINDS)[1] == sizes, ids


@pytest.mark.parametrize(
    ("ids", "sizes"),
    [
        ([PAD, 20, 21, PAD, SPACE, PAD, 22, PAD, COMMA], [2, 1]),
        ([SPACE, 20, SPACE, SPACE, PAD, 21, 22, 23, END], [1, 3]),
        ([PAD, SPACE, COMMA], []),
    ],
)
def test_word_sizes_count_sounding_ids(ids: list[int], sizes: list[int]) -> None:
    kinds, got = _spoken(ids, KINDS)
    assert kinds == b"".join(KINDS.codes[i] for i in ids)
    assert [k for k in range(len(ids)) if kinds[k : k + 1] == ID_SOUND] == np.flatnonzero(
        KINDS.sound[np.asarray(ids)]
    ).tolist()
    assert got == sizes


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
    words = written_words(text, spans, ids, KINDS)
    assert [text[w.span[0] : w.span[1]] for w in words] == voiced


def test_voiced_tokens_are_the_per_token_test_they_replaced() -> None:
    """One search says whether a clause has a token with nothing to say; the tokens are
    then those with a letter or digit, as the per-token test had them."""
    pool = ["a", "7", "²", "Ⅻ", "é", "_", "-", "—", ".", "'", " ", "\u00a0", "\n", "\u3000"]
    rng = random.Random(29)
    for _ in range(3000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))
        spans = [m.span() for m in re.finditer(r"\S+", text)]
        want = [
            (token, span)
            for token, span in zip(text.split(), spans, strict=True)
            if any(map(str.isalnum, token))
        ]
        assert _voiced(text, spans) == want, repr(text)
