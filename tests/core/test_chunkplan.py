"""The chunk plan and the quick start's join, table-tested without a model."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.core.chunkplan import (
    ModePlan,
    SeamWindow,
    choose_seam,
    mode_plan,
    plan_chunks,
    quick_prefix,
)

SPACE, STOP, PAD = 3, 32, 0  # the bundled voice's ids for " ", "t" and the pad


def is_space(i: int) -> bool:
    return i == SPACE


def is_stop(i: int) -> bool:
    return i == STOP


def test_plan_chunks_respects_bounds_and_boundaries() -> None:
    rng = np.random.default_rng(1)
    durations = rng.integers(0, 8, size=300).astype(np.float32)
    boundary = [bool(x) for x in rng.random(300) < 0.2]
    plan = mode_plan("dialog", 1000 * 256 / 22050)
    chunks, _ = plan_chunks(durations, boundary, plan, plan.first_target, first=True)
    total = int(durations.sum())
    assert chunks[0][0] == 0 and chunks[-1][1] == total
    assert all(a < b for a, b in chunks)
    assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))
    assert plan.first_min <= chunks[0][1] <= plan.first_max
    sizes = [b - a for a, b in chunks[:-1]]
    assert max(sizes) <= plan.cap * 1.5
    # Growth: later chunks are not smaller than the first.
    assert all(s >= chunks[0][1] // 2 for s in sizes)


def test_sentence_mode_is_one_chunk_per_clause() -> None:
    plan = ModePlan(1, 1, 1, 1, whole=True)
    chunks, _ = plan_chunks(np.ones(50, dtype=np.float32), [False] * 50, plan, 1, True)
    assert chunks == [(0, 50)]


@pytest.mark.parametrize("mode", ["dialog", "reading", "sentence"])
def test_every_plan_cuts_where_a_break_goes(mode: str) -> None:
    durations = np.full(200, 2, dtype=np.float32)
    plan = mode_plan(mode, 1000 * 256 / 22050)
    chunks, _ = plan_chunks(durations, [False] * 200, plan, plan.first_target, True, 0, [37, 250])
    edges = {a for a, _ in chunks} | {b for _, b in chunks}
    assert {37, 250} <= edges
    assert chunks[0][0] == 0 and chunks[-1][1] == 400
    assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))


def test_a_plan_may_start_inside_a_clause() -> None:
    """After a quick start's join, the rest of the sentence is planned from there."""
    durations = np.full(100, 3, dtype=np.float32)
    plan = mode_plan("dialog", 1000 * 256 / 22050)
    chunks, _ = plan_chunks(durations, [True] * 100, plan, 16, first=False, start=20)
    assert chunks[0][0] == 20 and chunks[-1][1] == 300
    assert chunks[0][1] - 20 >= 8  # the grown target, not a first chunk


def ids_of(words: list[int]) -> np.ndarray:
    """BOS, pad, then each word's phonemes (each id followed by a pad) and a space, EOS."""
    out = [1, PAD]
    for k, n in enumerate(words):
        for j in range(n):
            out += [STOP if j == 1 else 14, PAD]
        if k < len(words) - 1:
            out += [SPACE, PAD]
    return np.asarray([*out, 2], dtype=np.int64)


def test_the_quick_prefix_ends_after_a_word_gap_and_leaves_as_much() -> None:
    ids = ids_of([4] * 40)  # ~400 ids
    cut = quick_prefix(ids, is_space, 96)
    assert cut is not None and cut >= 96 and ids[cut - 2] == SPACE
    assert len(ids) - cut >= 96
    assert quick_prefix(ids_of([4] * 15), is_space, 96) is None  # too short to pay


SEAMS = [
    # (word lengths in phonemes, frames per id, window, want (ids, frames) or None)
    ([2, 3, 3], 1.0, SeamWindow(4, 8, 12), (8, 8)),  # the first word gap: 8 frames in
    ([2, 3, 3], 1.0, SeamWindow(9, 10, 20), (16, 16)),  # the second
    ([12, 3], 1.0, SeamWindow(4, 8, 12), (4, 4)),  # a long first word: at its stop consonant
    ([12, 3], 1.0, SeamWindow(6, 8, 12), None),  # nothing in the window
]


@pytest.mark.parametrize(("words", "per_id", "window", "want"), SEAMS)
def test_the_join_is_at_a_word_gap_or_else_a_stop(
    words: list[int], per_id: float, window: SeamWindow, want: tuple[int, int] | None
) -> None:
    ids = ids_of(words)
    durations = np.full(len(ids), per_id, dtype=np.float32)
    assert choose_seam(ids, durations, len(ids) - 1, window, is_space, is_stop) == want


def test_a_first_word_longer_than_the_window_joins_at_a_phonemes_onset() -> None:
    """No word gap and no stop in the window (issue 46: the first packet then waited for
    the whole prior): given the pad test, the join falls before the phoneme whose onset is
    nearest the target, right after a pad; a word gap or a stop still comes first."""

    def is_pad(i: int) -> bool:
        return i == PAD

    def seam(words: list[int], pads: bool) -> tuple[int, int] | None:
        ids = ids_of(words)
        durations = np.full(len(ids), 1.0, dtype=np.float32)
        window = SeamWindow(6, 8, 12)
        return choose_seam(
            ids, durations, len(ids) - 1, window, is_space, is_stop, is_pad if pads else None
        )

    assert seam([12, 3], pads=False) is None
    assert seam([12, 3], pads=True) == (8, 8)
    ids = ids_of([12, 3])
    assert ids[7] == PAD and ids[8] not in (PAD, SPACE)
    assert seam([2, 3, 3], pads=True) == (8, 8) == seam([2, 3, 3], pads=False)
