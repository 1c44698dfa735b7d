"""Word timings: which written word of the text sounds when, from the model's durations.

A clause reaches the model as phoneme ids; the prior gives every id its frames.  Word
gaps are the space id espeak puts between words, so the ids between two gaps are one
spoken word, and the frames before its first sounding id say when it starts.  The
clause's text (after normalisation and SSML) splits at whitespace into spoken tokens,
each with the span of the source characters it came from (:mod:`appliance.text.textmap`):
tokens that came from one written token ("$49.95" → "forty-nine dollars and ninety-five
cents", a ``<sub>``'s alias) share that span and become ONE written word.

Pure functions over ids, the voice's id kinds (:class:`~appliance.text.phonemize.IdKinds`:
word gaps, sounding ids, pads as tables) and the clause's words, so they are table-tested
without a model; the stream (:mod:`appliance.core.streaming`) turns id positions into
output milliseconds (speed, prosody, breaks and clause pauses are in that mapping, not
here).

This runs on the first packet's critical path (issue 29: ≤ +0.5 ms), so the passes over
ids are numpy over the id array, and the alignment, only run where espeak's count of words
differs from the text's, is a tight loop.

Bounds: the passes over ids and tokens are linear in the clause's ids and words; the
alignment is its tokens × (3 + |tokens − words|) cells, five steps each (:func:`align`; a
clause is capped by the frontend); nothing is kept between calls.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from appliance.speech import IntArray, Word
from appliance.text.phonemize import IdKinds

Ids = Sequence[int] | IntArray

_VOICED = re.compile(r"[^\W_]")
"""A letter or digit: ``\\w`` is exactly ``str.isalnum`` and ``_`` (for every code point)."""


def spoken_words(ids: Ids, kinds: IdKinds) -> list[tuple[int, int]]:
    """Id ranges [i, j) of each spoken word, in order: from the pad just before its first
    sounding id (the voice's transition into it) to its last sounding id, between two word
    gaps (a gap with no sound in it is no word; punctuation is the pause after a word).

    The pad is in because the sound starts there: against pocketsphinx's word starts, the
    first sounding id is ~55 ms late on average, its pad ~32 ms (tests/doors/v1)."""
    a = np.asarray(ids, dtype=np.int64)
    at = np.flatnonzero(kinds.sound[a])
    if not at.size:
        return []
    gap = kinds.space[a].cumsum()[at]  # which stretch between gaps each sounding id is in
    cut = np.flatnonzero(gap[1:] != gap[:-1])  # the last sounding id of a word, bar the last
    first = at[np.concatenate(([0], cut + 1))]
    end = at[np.append(cut, at.size - 1)] + 1
    # Before a word's first sounding id is its gap or a silent id of its own stretch.
    start = first - (kinds.pad[a[first - 1]] & (first > 0))
    return list(zip(start.tolist(), end.tolist(), strict=True))


@dataclass(frozen=True)
class WrittenWord:
    """One written word of the source and the ids that say it."""

    span: tuple[int, int]
    start: int
    end: int
    """Id positions [start, end) of the clause."""


def _proportional(n_tokens: int, n_spoken: int) -> list[tuple[int, int]]:
    """Spoken words [lo, hi] (inclusive) of each token in proportion (the last resort)."""
    out = []
    for t in range(n_tokens):
        lo = t * n_spoken // n_tokens
        hi = max(lo, -(-(t + 1) * n_spoken // n_tokens) - 1)
        out.append((lo, min(hi, n_spoken - 1)))
    return out


MAX_JOIN = 3
"""Most tokens espeak says as one word ("in the" → ɪnðə), or spoken words of one token."""
_STEPS = ((3, 1), (2, 1), (1, 3), (1, 2), (1, 1))
"""(tokens, spoken words) of one alignment step, in the order :func:`_programme` weighs
them (from the earliest cell first: a tie goes to the first)."""
_JOIN_COST = 0.5
"""What a step that is not one to one costs on top of its sizes' difference."""


def align(token_sizes: Sequence[int], word_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """Spoken words [lo, hi] (inclusive) of each token, when espeak counted differently.

    espeak runs short function words together ("in the", "that the", "had been" are one
    word gap apart from their neighbours, not from each other), and may say one token as
    two.  ``token_sizes``: sounding ids of each token said alone; ``word_sizes``: of each
    spoken word of the clause.  A monotonic alignment (dynamic programming, within the
    band of j - i the net joins and splits allow) where each step joins up to
    :data:`MAX_JOIN` tokens into one word or splits one token into up to that many words,
    costing the difference in size (and :data:`_JOIN_COST` for not being one to one).

    Work: tokens × (3 + |tokens − words|) cells, five steps each, written out in
    :func:`_programme` (the same cells, steps and ties as the whole-table programme it
    replaced; a test holds the two equal).  For the core table's 266-character sentence
    (49 tokens, 46 words, three joins) ~0.11 ms of the word work's ~0.23 ms in-process,
    where it was 0.23 of 0.43 ms (0.38 against 0.70 ms while another process shares the
    core; ``compute_cost`` in ``bench/wordtimes.py``, see docs/word-timings.md)."""
    n, m = len(token_sizes), len(word_sizes)
    if n == 0 or m == 0:
        return []
    low = min(0, m - n) - 1
    steps = _programme(token_sizes, word_sizes, low)
    if steps is None:
        return _proportional(n, m)
    out: list[tuple[int, int]] = [(0, 0)] * n
    i, j = n, m
    while i > 0:
        a, b = _STEPS[steps[i][j - i - low + 2]]
        out[i - a : i] = [(j - b, j - 1)] * a
        i, j = i - a, j - b
    return out


def _programme(
    token_sizes: Sequence[int], word_sizes: Sequence[int], low: int
) -> list[list[int]] | None:
    """The step (index into :data:`_STEPS`) that reaches each cell (i tokens, j words)
    most cheaply, by rows of i, at ``j - i - low + 2``; None if (n, m) cannot be reached.

    Joins move j - i down, splits up: the path stays within the net count of them, and
    one step either side (a join and a split that cancel out): the band [low, high].  Each
    row keeps two unreachable cells either side of the band, so a step from outside it
    reads infinity; the steps are written out (this is the alignment's inner loop)."""
    n, m = len(token_sizes), len(word_sizes)
    high = max(0, m - n) + 1
    inf = float("inf")
    pad = [inf] * (high - low + 5)
    # Sizes of the last one, two, three tokens before i and words before j (0 where there
    # are none: the cell such a step comes from is unreachable anyway).
    t = [0, 0, 0, *token_sizes]
    w1 = [0, *word_sizes]
    w2 = [0, 0, *(a + b for a, b in itertools.pairwise(word_sizes))]
    w3 = [0, 0, 0, *(a + b for a, b in zip(w2[2:], word_sizes[2:], strict=False))]
    rows = [pad, pad, pad, [*pad]]  # cost of reaching cell; row i is rows[i + 3]
    rows[3][2 - low] = 0.0
    how: list[list[int]] = [[]]
    join = _JOIN_COST  # a local: the loop below is the hot path
    for i in range(1, n + 1):
        t1 = t[i + 2]
        t2 = t1 + t[i + 1]
        t3 = t2 + t[i]
        r1, r2, r3 = rows[i + 2], rows[i + 1], rows[i]
        row, got = [*pad], [0] * len(pad)
        j = max(1, i + low)
        for x in range(j - i - low + 2, min(m, i + high) - i - low + 3):
            wj = w1[j]
            best, step = r3[x + 2] + abs(t3 - wj), 0
            if (c := r2[x + 1] + abs(t2 - wj)) < best:
                best, step = c, 1
            if (c := r1[x - 2] + abs(t1 - w3[j])) < best:
                best, step = c, 2
            if (c := r1[x - 1] + abs(t1 - w2[j])) < best:
                best, step = c, 3
            best += join
            if (c := r1[x] + abs(t1 - wj)) < best:
                best, step = c, 4
            row[x], got[x] = best, step
            j += 1
        rows.append(row)
        how.append(got)
    return how if rows[n + 3][m - n - low + 2] < inf else None


def written_words(
    text: str,
    word_spans: Sequence[tuple[int, int]],
    ids: Ids,
    spoken: Sequence[tuple[int, int]],
    kinds: IdKinds,
    token_size: Callable[[str], int] | None = None,
) -> list[WrittenWord]:
    """The clause's written words in order, each with its source span and its ids.

    ``text``/``word_spans``: the clause's text and the source span of each of its tokens;
    ``ids``/``spoken``: its ids and spoken words (:func:`spoken_words`); ``token_size``: a
    token's sounding ids said alone, for when espeak's count differs from the text's
    (:func:`align`; without it, in proportion).  Tokens espeak said as one word share
    that word's ids in proportion to their sizes.  Tokens with no letter or digit (a
    dash) are not spoken; consecutive tokens whose source spans overlap ("$49.95" said
    as five words) are one written word."""
    if not spoken:
        return []
    # The frontend's words are \S+, whose whitespace is str.split's (word_spans follow it).
    voiced = [
        (token, span)
        for token, span in zip(text.split(), word_spans, strict=False)
        if token.isalnum() or _VOICED.search(token)  # most tokens are a bare word
    ]
    if not voiced:
        return []
    if len(voiced) == len(spoken):
        placed = list(spoken)
    else:
        placed = _recounted([t for t, _ in voiced], ids, spoken, kinds, token_size)
    out: list[WrittenWord] = []
    for (_, span), (a, b) in zip(voiced, placed, strict=True):
        if out and (span[0] < out[-1].span[1] or a < out[-1].end):
            prev = out[-1]
            merged = (min(prev.span[0], span[0]), max(prev.span[1], span[1]))
            out[-1] = WrittenWord(merged, prev.start, max(prev.end, b))
        else:
            out.append(WrittenWord(span, a, b))
    return out


def _recounted(
    tokens: Sequence[str],
    ids: Ids,
    spoken: Sequence[tuple[int, int]],
    kinds: IdKinds,
    token_size: Callable[[str], int] | None,
) -> list[tuple[int, int]]:
    """Each token's id range when espeak's count of words differs from the text's."""
    sounding = np.flatnonzero(kinds.sound[np.asarray(ids, dtype=np.int64)])
    if token_size is not None:
        sizes = [max(1, token_size(t)) for t in tokens]
        ranges = align(sizes, word_sizes(sounding, spoken))
    else:
        sizes = [max(1, sum(c.isalnum() for c in t)) for t in tokens]
        ranges = _proportional(len(tokens), len(spoken))
    return _token_ids(ranges, sizes, spoken, sounding)


def _token_ids(
    ranges: Sequence[tuple[int, int]],
    sizes: Sequence[int],
    spoken: Sequence[tuple[int, int]],
    sounding: IntArray,
) -> list[tuple[int, int]]:
    """Each token's id range: its spoken words' ids; tokens that share the same spoken
    words split their sounding ids (``sounding``: the clause's, ascending) in proportion
    to their sizes."""
    out: list[tuple[int, int]] = []
    t = 0
    while t < len(ranges):
        u = t + 1
        while u < len(ranges) and ranges[u] == ranges[t]:
            u += 1
        a, b = spoken[ranges[t][0]][0], spoken[ranges[t][1]][1]
        if u - t == 1:
            out.append((a, b))
            t = u
            continue
        pos = sounding[sounding.searchsorted(a) : sounding.searchsorted(b)].tolist()
        total, cum, c0 = sum(sizes[t:u]), 0, 0
        for k in range(t, u):
            cum += sizes[k]
            c1 = (
                len(pos)
                if k == u - 1
                else min(len(pos), max(c0 + 1, round(cum * len(pos) / total)))
            )
            if c1 <= c0:  # nothing left for it: it shares the one before
                out.append(out[-1])
                continue
            start = a if c0 == 0 else pos[c0]
            end = b if c1 == len(pos) else pos[c1 - 1] + 1
            out.append((start, end))
            c0 = c1
        t = u
    return out


def word_sizes(sounding: IntArray, spoken: Sequence[tuple[int, int]]) -> list[int]:
    """Sounding ids of each spoken word (the sizes :func:`align` compares); ``sounding``:
    the positions of the clause's sounding ids, ascending."""
    ends = np.fromiter(itertools.chain.from_iterable(spoken), np.int64, 2 * len(spoken))
    bounds = sounding.searchsorted(ends)
    sizes: list[int] = (bounds[1::2] - bounds[::2]).tolist()
    return sizes


IdTime = Callable[[int, bool], float]
"""Output ms where id position ``p`` sounds; ``True``: a word starts there (a pause at
that very place comes before it), ``False``: a word ends there."""


def timed_words(words: Sequence[WrittenWord], at: IdTime) -> list[Word]:
    """Each written word with its offset and duration (:class:`~appliance.speech.Word`)."""
    out: list[Word] = []
    for w in words:
        start = at(w.start, True)
        end = at(w.end, False)
        out.append(Word(w.span, start, max(0.0, end - start)))
    return out
