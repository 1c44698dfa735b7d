"""Where a clause's audio is cut into chunks, and where a quick start joins its sentence.

Pure functions over a clause's phoneme ids and their durations (frames per id), so the
plan is table-tested without a model.  Frames are the voice's hop (11.6 ms for the
bundled voice); a cut anywhere is exact (windowed decoding needs no crossfade), so cuts
are chosen for the listener: word and pause boundaries, chunk sizes that grow faster
than they play, silence of SSML breaks spliced in at word gaps.

Pure: a request's first clause is planned on a worker, in its encode item
(:mod:`appliance.core.pipeline.encode`), a later clause on the loop when its turn comes.
Work is linear in the clause's ids (and its SSML marks and pauses); nothing is kept.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from appliance.speech import FloatArray, IntArray

if TYPE_CHECKING:
    from appliance.text.frontend import Clause

IdTest = Callable[[int], bool]


@dataclass(frozen=True)
class ModePlan:
    """Chunk sizes in frames: the first chunk's bounds and the growth cap."""

    first_min: int
    first_target: int
    first_max: int
    cap: int
    whole: bool = False


def mode_plan(mode: str, frame_ms: float) -> ModePlan:
    def f(ms: float) -> int:
        return max(1, round(ms / frame_ms))

    if mode == "reading":
        return ModePlan(f(120), f(300), f(400), f(1200))
    if mode == "sentence":
        return ModePlan(1, 1, 1, 1, whole=True)
    # dialog: the first chunk is small so the first sound comes quickly; each
    # next chunk about doubles, so the client's buffer grows faster than it drains.
    return ModePlan(f(90), f(95), f(190), f(800))


def plan_chunks(
    durations: FloatArray,
    boundary: Sequence[bool],
    plan: ModePlan,
    target: int,
    first: bool,
    start: int = 0,
    forced: Sequence[int] = (),
) -> tuple[list[tuple[int, int]], int]:
    """Frame ranges covering frames [``start``, end) of one clause; returns them and the
    next target size.

    Cuts go at word and pause boundaries (the end of a space or punctuation id) closest
    to the target size within bounds; anywhere is exact, the boundaries just keep
    ``text_span`` honest and chunks whole words.  ``forced``: frames every plan cuts at
    (where an SSML break's silence goes), whole mode included.
    """
    ends = np.cumsum(durations).astype(np.int64)
    total = int(ends[-1]) if len(ends) else 0
    stops = sorted({f for f in forced if start < f < total} | {total})
    if total <= start:
        return [], target
    if plan.whole:
        edges = [start, *stops]
        return list(itertools.pairwise(edges)), target
    cuts = sorted({int(e) for e, is_b in zip(ends, boundary, strict=False) if is_b})
    chunks: list[tuple[int, int]] = []
    a = start
    for stop in stops:
        while a < stop:
            if first and not chunks:
                lo, tgt, hi = plan.first_min, plan.first_target, plan.first_max
            else:
                lo, tgt, hi = max(1, target // 2), target, max(target, round(target * 1.5))
            if stop - a <= hi:
                b = stop
            else:
                near = [c for c in cuts if a + lo <= c <= a + hi]
                b = min(near, key=lambda c: abs(c - (a + tgt))) if near else a + tgt
                if stop - b < max(1, lo // 2):
                    b = stop
            chunks.append((a, b))
            target = min(plan.cap, max(target, 2 * (b - a)))
            a = b
    return chunks, target


_WORD = re.compile(r"\S+")


def position_frames(
    clause: Clause,
    positions: Sequence[int],
    ids: IntArray,
    durations: FloatArray,
    is_space: IdTest,
) -> list[float]:
    """The frame where the voice is at each character position of ``clause.text``.

    A position before the clause's word *w* is placed where the voice starts that word:
    after the *w*-th word gap (space id) in the durations.  espeak may count words
    differently from the text (a "twenty-six" is one word, a lone dash none), so *w* is
    scaled to espeak's count; the result is within a word of the boundary, inside one
    window.  (SSML marks and breaks are placed this way.)
    """
    starts = [m.start() for m in _WORD.finditer(clause.text)]
    cum = np.concatenate([[0.0], np.cumsum(durations, dtype=np.float64)])
    total = float(cum[-1])
    gaps = [k for k, i in enumerate(ids.tolist()) if is_space(int(i))]
    out: list[float] = []
    for pos in positions:
        w = sum(1 for a in starts if a < pos)
        if w >= len(starts):  # after the last word begins: the end of the clause
            out.append(total)
            continue
        if w == 0:
            out.append(0.0)
            continue
        if len(gaps) + 1 != len(starts):
            w = min(len(gaps), max(1, round(w * (len(gaps) + 1) / len(starts))))
        out.append(float(cum[gaps[w - 1] + 1]) if gaps else total * w / len(starts))
    return out


def pause_frames(
    clause: Clause, ids: IntArray, durations: FloatArray | None, is_space: IdTest
) -> list[float]:
    """The frame each of the clause's SSML pauses goes after (:func:`position_frames`);
    none for a whole-clause voice (``durations`` None), whose pauses are its clause's."""
    if not clause.pauses or durations is None:
        return []
    positions = [p.position for p in clause.pauses]
    return position_frames(clause, positions, ids, durations, is_space)


def chunk_span(clause: Clause, a: float, b: float, total: float) -> tuple[int, int]:
    """Original-text span of [a, b) of a clause measured in ``total`` (frames, or ids):
    whole words, by position; the first and last chunks reach the clause's own ends (a
    word's span leaves out markup after it, as in ``<sub alias='now'>NOW</sub>.``, which
    the clause's last chunk still covers)."""
    words = clause.word_spans
    if not words or total <= 0:
        return clause.span
    n = len(words)
    i = min(n - 1, math.floor(a / total * n))
    j = max(i + 1, min(n, math.ceil(b / total * n)))
    start = clause.span[0] if i == 0 else words[i][0]
    end = clause.span[1] if j == n else words[j - 1][1]
    return (start, end)


# ------------------------------------------------------------------ the quick start

QUICK_PREFIX_IDS = 96
"""Phoneme ids of a quick encoding (~2 s of speech, ~8 words).  The more of the sentence
it sees, the closer its first words' durations come to the whole sentence's (the text
encoder attends to all of it): over 20 sentences the first word's length differed by
1.85 frames on average with 64 ids, 1.45 with 96, 1.3 with 128 (docs/speed.md)."""

QUICK_MIN_IDS = 2 * QUICK_PREFIX_IDS
"""The shortest clause a quick start pays for (shorter ones' whole prior is as quick)."""

QUICK_MAX_MS = 250.0
"""The join comes within this much audio as heard: everything after it is the whole
sentence's.  Past the voice's speed (a time-stretch of ``s``) that is ``s`` times as much
of the voice's own audio (~600 ms at 3×: the first three or four words)."""


def quick_prefix(ids: IntArray, is_space: IdTest, min_ids: int = QUICK_PREFIX_IDS) -> int | None:
    """How many leading ids a quick encoding takes: up to the first word gap (and its pad)
    at or past ``min_ids``, leaving at least ``min_ids`` after it; None for shorter ids
    (the whole prior is then about as quick)."""
    for k in range(max(2, min_ids - 2), len(ids) - min_ids):
        if is_space(int(ids[k])):
            return k + 2
    return None


@dataclass(frozen=True)
class SeamWindow:
    """Frames of quick audio before the join: at least ``lo`` (the whole prior must be done
    by then), at most ``hi``, best near ``target``."""

    lo: int
    target: int
    hi: int


def choose_seam(
    ids: IntArray,
    durations: FloatArray,
    cut: int,
    window: SeamWindow,
    is_space: IdTest,
    is_closure: IdTest,
    is_pad: IdTest | None = None,
) -> tuple[int, int] | None:
    """Where a quick encoding joins the whole sentence: ``(p, frames)``, the join after
    ``ids[:p]`` (p < ``cut``, ids both encodings share) and the quick frames before it.

    Word gaps first (the join sits right before a word's first phoneme), then the onset of
    a stop consonant (its closure is near silence), then (given ``is_pad``) any phoneme's
    onset, the pad before it (a first word longer than the window, issue 46: the first
    packet waited for the whole prior, 4.4× the short command's for a 262-character
    sentence; the crossfade hides the seam); the candidate within the window nearest its
    target; None when there is none."""
    ends = np.cumsum(durations)

    def nearest(cands: list[int]) -> tuple[int, int] | None:
        inside = [(p, int(ends[p - 1])) for p in cands if 2 < p < cut]
        inside = [(p, f) for p, f in inside if window.lo <= f <= window.hi]
        if not inside:
            return None
        return min(inside, key=lambda pf: abs(pf[1] - window.target))

    gaps = [k + 2 for k in range(cut) if is_space(int(ids[k]))]
    closures = [k for k in range(cut) if is_closure(int(ids[k]))]
    found = nearest(gaps) or nearest(closures)
    if found is None and is_pad is not None:
        onsets = [
            k
            for k in range(1, cut)
            if is_pad(int(ids[k - 1])) and not (is_pad(int(ids[k])) or is_space(int(ids[k])))
        ]
        found = nearest(onsets)
    return found
