"""Word timings: which written word of the text sounds when, from the model's durations.

A clause reaches the model as phoneme ids; the prior gives every id its frames.  Word
gaps are the space id espeak puts between words, so the ids between two gaps are one
spoken word, and the frames before its first sounding id say when it starts.  The
clause's text (after normalisation and SSML) splits at whitespace into spoken tokens,
each with the span of the source characters it came from (:mod:`appliance.text.textmap`):
tokens that came from one written token ("$49.95" → "forty-nine dollars and ninety-five
cents", a ``<sub>``'s alias) share that span and become ONE written word.

Functions (and one class) over ids, the voice's id kinds
(:class:`~appliance.text.phonemize.IdKinds`: word gaps, sounding ids, pads) and the
clause's words, so they are table-tested without a model; the pipeline's worker stage
(:mod:`appliance.core.pipeline.encode`) runs them, its timeline
(:mod:`appliance.core.pipeline.timeline`) turns id positions into output milliseconds
(speed, prosody, breaks and clause pauses are in that mapping, not here).

A request's first clause does this on its first packet's path (issue 29: ≤ +0.5 ms), so
:class:`WordWork` finds there only the words its first chunk needs, exactly as the whole
clause's alignment has them, and the rest with its next chunk.  The ids are read as one
string of their kinds, a byte each, searched by ``bytes``' and ``re``'s C loops as far
as the first words need (right after the model's runs, a Python loop over a long
clause's ids, or numpy's calls, cost more than the work); the alignment, only run where
espeak's count of words differs from the text's, is a tight loop.

Bounds: the passes over ids and tokens are linear in the clause's ids and words; the
alignment is its tokens × (3 + |tokens − words|) cells, five steps each (:func:`align`; a
clause is capped by the frontend); a :class:`WordWork` holds one clause's rows until its
clause's words are all found; nothing is kept between clauses.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from appliance.speech import FloatArray, IntArray, Word
from appliance.text.phonemize import ID_PAD, ID_SILENT, ID_SOUND, ID_SPACE, IdKinds

Ids = Sequence[int] | IntArray


def spoken_words(ids: Ids, kinds: IdKinds) -> list[tuple[int, int]]:
    """Id ranges [i, j) of each spoken word, in order: from the pad just before its first
    sounding id (the voice's transition into it) to its last sounding id, between two word
    gaps (a gap with no sound in it is no word; punctuation is the pause after a word).

    The pad is in because the sound starts there: against pocketsphinx's word starts, the
    first sounding id is ~55 ms late on average, its pad ~32 ms (tests/doors/v1)."""
    kinds_string, sizes = _spoken(ids, kinds)
    return _SpokenWords(kinds_string, len(sizes)).all()


def spoken_spans(kinds: bytes) -> Iterator[tuple[int, int]]:
    """:func:`spoken_words` of a clause's kinds (:meth:`IdKinds.string`), each found as it
    is asked for (visemes run only as far as the chunk being sent)."""
    return (m.span() for m in _SPOKEN.finditer(kinds))


_SPOKEN = re.compile(b"%s?%s(?:[^%s]*%s)?" % (ID_PAD, ID_SOUND, ID_SPACE, ID_SOUND))
"""A spoken word in a clause's kinds (:meth:`IdKinds.string`): its first sounding id (and
the pad right before it) to its last, with no word gap between."""
_NOT_SOUNDS = ID_SILENT + ID_PAD
"""Deleted, a clause's kinds split at its gaps into each spoken word's sounding ids."""


def _spoken(ids: Ids, kinds: IdKinds) -> tuple[bytes, list[int]]:
    """The clause's kinds as one string (:meth:`IdKinds.string`: C loops, where a Python loop
    over a long clause's ids cost more than the rest of its first packet's word work),
    and each spoken word's count of sounding ids (the sizes :func:`align` compares)."""
    string = kinds.string(ids.tolist() if isinstance(ids, np.ndarray) else ids)
    return string, list(map(len, string.translate(None, _NOT_SOUNDS).split()))


class _SpokenWords:
    """A clause's spoken words (:func:`spoken_words`), each found when first asked for: a
    first packet needs a long clause's first few, the rest come with its next chunk."""

    def __init__(self, kinds: bytes, count: int) -> None:
        """``kinds``: the clause's (:meth:`IdKinds.string`), with ``count`` spoken words."""
        self.kinds = kinds
        self._count = count
        self._found: list[tuple[int, int]] = []
        self._more = _SPOKEN.finditer(kinds)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, k: int) -> tuple[int, int]:
        found = self._found
        while len(found) <= k:
            found.append(next(self._more).span())
        return found[k]

    def starting_before(self, position: int) -> int:
        """How many start before id ``position``."""
        found = self._found
        while len(found) < self._count and (not found or found[-1][0] < position):
            found.append(next(self._more).span())
        return bisect.bisect_left(found, (position,))

    def all(self) -> list[tuple[int, int]]:
        self._found.extend(m.span() for m in self._more)
        return self._found


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
"""(tokens, spoken words) of one alignment step, in the order :class:`_Programme` weighs
them (from the earliest cell first: a tie goes to the first)."""
_JOIN_COST = 0.5
"""What a step that is not one to one costs on top of its sizes' difference."""


def reachable(n_tokens: int, n_spoken: int) -> bool:
    """Whether :func:`align` can pair them at all: steps join or split at most
    :data:`MAX_JOIN` (else the tokens go in proportion).  Joins alone reach any
    n ≤ MAX_JOIN·m and splits alone the reverse, within the band; mixing them only costs."""
    return 0 < n_tokens <= MAX_JOIN * n_spoken and n_spoken <= MAX_JOIN * n_tokens


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
    :class:`_Programme` (the same cells, steps and ties as the whole-table programme it
    replaced; a test holds the two equal).  For the core table's 266-character sentence
    (49 tokens, 46 words, three joins) ~0.11 ms of the word work's ~0.23 ms in-process;
    a request's first clause runs it in two parts (:class:`WordWork`)."""
    n, m = len(token_sizes), len(word_sizes)
    if not reachable(n, m):
        return _proportional(n, m) if n and m else []
    programme = _Programme(n, word_sizes)
    programme.run(token_sizes)
    return programme.ranges(n, m)


class _Programme:
    """:func:`align`'s dynamic programme, run some tokens (rows) at a time.

    The cost of reaching cell (i tokens, j words) is kept by rows of i, at ``j - i - low
    + 2``, with the step (index into :data:`_STEPS`) that reaches it most cheaply.  Joins
    move j - i down, splits up: a path stays within the net count of them, and one step
    either side (a join and a split that cancel out): the band [low, high].  Each row keeps
    two unreachable cells either side of the band, so a step from outside it reads
    infinity; the steps are written out (this is the alignment's inner loop).  A row needs
    only the three before it, so the rows of the first tokens are the whole clause's,
    whatever the tokens after them (:meth:`settled` says how much of the path they fix)."""

    def __init__(self, n: int, word_sizes: Sequence[int]) -> None:
        m = len(word_sizes)
        self.n, self.m = n, m
        self.low = min(0, m - n) - 1
        self.high = max(0, m - n) + 1
        self._pad = [float("inf")] * (self.high - self.low + 5)
        # Sizes of the last one, two, three tokens before i and words before j (0 where
        # there are none: the cell such a step comes from is unreachable anyway).
        self._t = [0, 0, 0]
        self._w1 = [0, *word_sizes]
        self._w2 = [0, 0, *(a + b for a, b in itertools.pairwise(word_sizes))]
        self._w3 = [0, 0, 0, *(a + b for a, b in zip(self._w2[2:], word_sizes[2:], strict=False))]
        self._rows = [self._pad, self._pad, self._pad, [*self._pad]]  # row i is rows[i + 3]
        self._rows[3][2 - self.low] = 0.0
        self.how: list[list[int]] = [[]]

    @property
    def done(self) -> int:
        """Tokens whose rows are run."""
        return len(self.how) - 1

    def run(self, token_sizes: Sequence[int]) -> None:
        """The rows of the next tokens (``token_sizes``: each said alone)."""
        low, high, m, pad = self.low, self.high, self.m, self._pad
        t, w1, w2, w3, rows = self._t, self._w1, self._w2, self._w3, self._rows
        t.extend(token_sizes)
        join = _JOIN_COST  # a local: the loop below is the hot path
        for i in range(self.done + 1, self.done + len(token_sizes) + 1):
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
            self.how.append(got)

    def settled(self) -> tuple[int, int]:
        """The last cell that every path through the rows run so far passes through: the
        alignment up to it is the whole clause's, whatever the tokens after (a streaming
        Viterbi decoder's traceback).  The whole clause's path leaves the rows run from
        one of the last three (a step joins up to three tokens); the paths back from
        each of their reachable cells are followed back a row at a time, the latest row
        first, until one cell is left (in the row's own offsets: a cell's step is read
        where it was written, with no tuple per cell)."""
        inf, low, how = float("inf"), self.low, self.how
        rows: dict[int, set[int]] = {}  # row i → offsets x of the cells left in it
        left = 0
        for i in range(max(0, self.done - 2), self.done + 1):
            frontier = {x for x, cost in enumerate(self._rows[i + 3]) if cost < inf}
            rows[i], left = frontier, left + len(frontier)
        if not left:
            return (0, 0)
        i = self.done
        while left > 1:
            for x in rows.pop(i) if i in rows else ():
                left -= 1
                a, b = _STEPS[how[i][x]]
                back = rows.setdefault(i - a, set())
                y = x + a - b  # the offset of (i - a, j - b)
                if y not in back:
                    back.add(y)
                    left += 1
            i -= 1
        i, last = next((r, xs) for r, xs in rows.items() if xs)
        return i, last.pop() + i + low - 2

    def ranges(self, i: int, j: int) -> list[tuple[int, int]]:
        """Spoken words [lo, hi] of each of the first ``i`` tokens, on the path to (i, j)."""
        out: list[tuple[int, int]] = [(0, 0)] * i
        while i > 0:
            a, b = _STEPS[self.how[i][j - i - self.low + 2]]
            out[i - a : i] = [(j - b, j - 1)] * a
            i, j = i - a, j - b
        return out


_SETTLE_LAG = 4
"""Rows :meth:`WordWork.before` first runs past the tokens it needs, then more as needed:
the settled cell trails the rows run by 5–9 over the prose of these docs (up to 24), but
each token run costs espeak ~30 µs the first time it is met, and each try ~30 µs: on the
docs' prose, 4 had the least first-packet cost of 2–12 cold and about the least warm."""


class WordWork:
    """The written words of one clause (:func:`written_words`), found in two parts when
    its first packet waits for them: :meth:`before` gives the first words (all that start
    before an id position: the first chunk's), :meth:`all` all of them, the same as one
    call would have found.

    The alignment is the costly part (and sizing tokens the phonemizer has not met, ~10
    µs each, 30–40 right after the model's runs): :meth:`before` runs its programme over
    the first tokens only (a few more than the words that start before the position),
    and gives the words up to the cell every path through those rows passes
    (:meth:`_Programme.settled`), so they are the whole clause's.  :meth:`all` runs the
    rest, on the work item of the clause's next chunk.  Not thread-safe; the stream calls
    it from one work item at a time."""

    @classmethod
    def of(
        cls,
        text: str,
        word_spans: Sequence[tuple[int, int]],
        ids: Ids,
        kinds: IdKinds,
        token_size: Callable[[str], int] | None = None,
    ) -> WordWork:
        """The work of a clause (``text``, its tokens' source spans) from its ids; with
        ``token_size`` (a token's sounding ids said alone), the tokens are aligned where
        espeak's count of words differs from the text's, else in proportion."""
        kinds_string, sizes = _spoken(ids, kinds)
        return cls(text, word_spans, _SpokenWords(kinds_string, len(sizes)), sizes, token_size)

    def __init__(
        self,
        text: str,
        word_spans: Sequence[tuple[int, int]],
        spoken: _SpokenWords,
        sizes: list[int],
        token_size: Callable[[str], int] | None,
    ) -> None:
        """``sizes``: each spoken word's count of sounding ids."""
        self._voiced = _voiced(text, word_spans)
        self._spoken = spoken
        self._token_size = token_size
        self._sizes: list[int] = []
        self._programme: _Programme | None = None
        self._all: list[WrittenWord] | None = None
        n, m = len(self._voiced), len(spoken)
        if not m or not n:
            self._all = []
        elif n == m:
            self._all = _merged(self._voiced, spoken.all())
        elif token_size is not None and reachable(n, m):
            self._programme = _Programme(n, sizes)
        else:
            self._all = self._recounted()

    @property
    def pending(self) -> bool:
        """Whether :meth:`all` has work left."""
        return self._all is None

    def before(self, position: int) -> list[WrittenWord]:
        """The clause's first written words: at least all that start before id
        ``position``, in order, each as :meth:`all` has it."""
        prog = self._programme
        if self._all is not None or prog is None:
            return self.all()
        n, m = prog.n, prog.m
        heard = self._spoken.starting_before(position)
        want = -(-heard * n // m) + 1  # about the tokens that say them, and one
        rows = want + _SETTLE_LAG
        while rows < n:
            self._run(rows)
            i, j = prog.settled()
            # Past the words before the position (else the last token settled is not):
            if j > heard:
                words = _merged(self._voiced[:i], self._token_ids(prog.ranges(i, j)))
                # The last may still merge with the tokens after: the ones before are whole.
                if words and words[-1].start >= position:
                    return words[:-1]
            rows += max(2, want + 1 - i)
        return self.all()

    def all(self) -> list[WrittenWord]:
        """All the clause's written words, in order."""
        if self._all is None:
            prog = self._programme
            assert prog is not None
            self._run(prog.n)
            self._all = _merged(self._voiced, self._token_ids(prog.ranges(prog.n, prog.m)))
        return self._all

    def _run(self, rows: int) -> None:
        prog, size = self._programme, self._token_size
        assert prog is not None and size is not None
        first = len(self._sizes)
        more = [max(1, size(t)) for t, _ in self._voiced[first:rows]]
        self._sizes.extend(more)
        prog.run(more)

    def _recounted(self) -> list[WrittenWord]:
        """In proportion: no way to size the tokens, or more joins than a step makes."""
        n, size = len(self._voiced), self._token_size
        self._sizes = [
            max(1, size(t) if size is not None else sum(c.isalnum() for c in t))
            for t, _ in self._voiced
        ]
        return _merged(self._voiced, self._token_ids(_proportional(n, len(self._spoken))))

    def _token_ids(self, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        return _token_ids(ranges, self._sizes, self._spoken)


_SILENT_TOKEN = re.compile(r"(?<!\S)(?:[^\w\s]|_)+(?!\S)")
"""A token with no letter or digit (``re``'s \\w is ``str.isalnum`` and "_", its \\s is
``str.isspace``, as ``str.split``'s)."""


def _voiced(text: str, word_spans: Sequence[tuple[int, int]]) -> list[tuple[str, tuple[int, int]]]:
    """The clause's tokens that say something (a letter or digit), with their spans.

    The frontend's tokens are \\S+, whose whitespace is ``str.split``'s (``word_spans``
    follow it).  Most clauses have no silent token: one search finds that, where a test
    per token cost ~1 µs each on the first packet's path."""
    tokens = zip(text.split(), word_spans, strict=False)
    if _SILENT_TOKEN.search(text) is None:
        return list(tokens)
    return [(token, span) for token, span in tokens if any(map(str.isalnum, token))]


def written_words(
    text: str,
    word_spans: Sequence[tuple[int, int]],
    ids: Ids,
    kinds: IdKinds,
    token_size: Callable[[str], int] | None = None,
) -> list[WrittenWord]:
    """The clause's written words in order, each with its source span and its ids.

    ``text``/``word_spans``: the clause's text and the source span of each of its tokens;
    ``ids``: its ids; ``token_size``: a token's sounding ids said alone, for when espeak's
    count of words (:func:`spoken_words`) differs from the text's (:func:`align`; without
    it, in proportion).  Tokens espeak said as one word share that word's ids in
    proportion to their sizes.  Tokens with no letter or digit (a dash) are not spoken;
    consecutive tokens whose source spans overlap ("$49.95" said as five words) are one
    written word."""
    return WordWork.of(text, word_spans, ids, kinds, token_size).all()


def _merged(
    voiced: Sequence[tuple[str, tuple[int, int]]], placed: Sequence[tuple[int, int]]
) -> list[WrittenWord]:
    """Tokens and their ids as written words: tokens whose spans or ids overlap are one."""
    out: list[WrittenWord] = []
    for (_, span), (a, b) in zip(voiced, placed, strict=True):
        if out and (span[0] < out[-1].span[1] or a < out[-1].end):
            prev = out[-1]
            merged = (min(prev.span[0], span[0]), max(prev.span[1], span[1]))
            out[-1] = WrittenWord(merged, prev.start, max(prev.end, b))
        else:
            out.append(WrittenWord(span, a, b))
    return out


def _token_ids(
    ranges: Sequence[tuple[int, int]],
    sizes: Sequence[int],
    spoken: _SpokenWords,
) -> list[tuple[int, int]]:
    """Each token's id range: its spoken words' ids; tokens that share the same spoken
    words split their sounding ids in proportion to their sizes."""
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
        kinds, sound = spoken.kinds, ID_SOUND[0]
        pos = [k for k in range(a, b) if kinds[k] == sound]
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


class FrameSums:
    """Frames before each id position of a clause (at ``len(durations)``: all of them),
    summed only as far as asked: the words a first chunk carries need only the first
    sums.  The durations are read through a ``memoryview``, a Python float at a time:
    a long clause's whole list (a float object per id) cost ~0.05 ms right after the
    model's runs, and numpy's scalars and calls more than the sums."""

    def __init__(self, durations: FloatArray) -> None:
        self._durations = durations.data
        self._sums = [0.0]

    def __getitem__(self, p: int) -> float:
        sums = self._sums
        if p >= len(sums):
            more = itertools.accumulate(self._durations[len(sums) - 1 : p], initial=sums[-1])
            next(more)  # the last sum, already in
            sums.extend(more)
        return sums[p]


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
