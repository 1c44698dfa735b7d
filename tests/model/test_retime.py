"""Re-timing the prior (appliance.model.retime): exact lengths in the voice's proportions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from appliance.model.engine.base import Scales
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.retime import respace, retime
from appliance.text.phonemize import Phonemizer
from tests.fakes.voice import flow_voice


def scale_of(unrounded: np.ndarray, new: np.ndarray) -> tuple[float, float]:
    """The open interval of factors s for which ceil(unrounded · s) == new (empty: lo >= hi)."""
    u = unrounded.astype(np.float64)
    lo = float(np.max((new - 1) / u))
    hi = float(np.min(new / u))
    return lo, hi


@pytest.mark.parametrize("rate", [0.5, 0.8, 1.25, 1.5, 2.0])
@pytest.mark.parametrize("seed", range(5))
def test_exact_length_in_the_voices_proportions(rate: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    u = rng.gamma(2.0, 1.6, size=rng.integers(5, 400)).astype(np.float32)
    d = np.ceil(u)
    new = retime(d, u, rate)
    target = math.floor(d.sum() / rate + 0.5)
    if target >= len(u):  # reachable: exact
        assert abs(new.sum() - target) <= 1, (new.sum(), target)
    assert new.min() >= 1  # no phoneme vanishes
    lo, hi = scale_of(u, new)
    assert lo < hi, "not what the voice gives at any one length scale"


def test_past_one_frame_each_every_id_keeps_its_frame() -> None:
    u = np.full(50, 1.3, np.float32)  # 100 frames, 50 ids: 2x would need 50, 4x 25
    assert retime(np.ceil(u), u, 4.0).tolist() == [1.0] * 50


def _starts(d: np.ndarray, anchors: list[int]) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(d)))[anchors]


@pytest.mark.parametrize("rate", [0.8, 1.25, 1.6])
@pytest.mark.parametrize("seed", range(6))
def test_anchors_start_where_the_rate_puts_them(rate: float, seed: int) -> None:
    """Each anchor (a word's first id) starts at its speed-1 frame / rate, rounded; the
    total and every id's frame are kept."""
    rng = np.random.default_rng(seed)
    # Words of 3–8 ids of 1.5 frames or more: each has frames to spare at these rates.
    lengths = rng.integers(3, 9, size=rng.integers(5, 50))
    u = (1.5 + rng.gamma(2.0, 1.6, size=int(lengths.sum()))).astype(np.float32)
    d = np.ceil(u)
    anchors = np.cumsum(lengths)[:-1].tolist()
    plain, new = retime(d, u, rate), retime(d, u, rate, anchors)
    assert new.sum() == plain.sum() and new.min() >= 1
    want = np.floor(_starts(d, anchors) / rate + 0.5)
    assert np.abs(_starts(new, anchors) - want).max() <= 0.0
    # Without them, the roundings before a word move it (what the anchors are for).
    assert np.abs(_starts(plain, anchors) - want).max() >= 1.0


def test_a_word_that_cannot_shrink_splits_its_miss() -> None:
    """Words of one-frame ids cannot go faster: the frames they keep push the next word
    late, and the words before start that much early, so neither misses by the whole."""
    u = np.array([3.6, 3.6, 0.9, 0.9, 0.9, 0.9, 3.6, 3.6], np.float32)
    d = np.ceil(u)  # 4 4 1 1 1 1 4 4: the middle word of four ids, one frame each
    anchors = [2, 6]
    new = retime(d, u, 2.0, anchors)
    assert new[2:6].tolist() == [1.0] * 4 and new.sum() == retime(d, u, 2.0).sum()
    want = np.floor(_starts(d, anchors) / 2.0 + 0.5)  # 4 and 6: the middle word wants 2
    miss = _starts(new, anchors) - want
    assert miss.tolist() == [-1.0, 1.0], new


def test_rate_one_is_the_prior_itself() -> None:
    u = np.array([0.4, 2.5, 1.0, 3.7, 0.9], np.float32)
    assert retime(np.ceil(u), u, 1.0).tolist() == np.ceil(u).tolist()


def test_respace_repeats_each_ids_column() -> None:
    d = np.array([2, 1, 3], np.float32)
    x = np.repeat(np.array([[[1.0, 2.0, 3.0]]], np.float32), d.astype(int), axis=2)
    got = respace(x, d, np.array([1, 2, 1], np.float32))
    assert got.tolist() == [[[1.0, 2.0, 2.0, 3.0]]]
    with pytest.raises(ValueError):
        respace(x, np.array([2, 0, 4], np.float32), np.array([1, 1, 1], np.float32))


@pytest.fixture(scope="module")
def flow_model(voice_cache: Path) -> tuple[OnnxVoiceModel, Phonemizer]:
    voice, model = flow_voice(voice_cache)
    return model, Phonemizer(voice.info)


@pytest.mark.parametrize("rate", [0.6, 1.3, 1.5])
def test_retimed_prior_is_the_graph_at_the_found_scale(
    flow_model: tuple[OnnxVoiceModel, Phonemizer], rate: float
) -> None:
    """With the noise off, the re-timed prior is exactly the graph run at the length scale
    the re-timing found: the voice's own rendering at that speed, only exactly as long."""
    model, ph = flow_model
    assert model.retimes
    ids = ph.ids("The committee met on a cold and windy morning to review the proposal.")
    quiet = Scales(0.0, 1.0, 0.0)
    base = model.encode_prior(ids, quiet, None)
    fast = model.encode_prior(ids, Scales(0.0, 1.0, 0.0, rate=rate), None)
    assert fast.base_frames == int(base.durations.sum())
    assert abs(fast.durations.sum() - base.durations.sum() / rate) <= 1.0
    # The graph at the smallest length scale that gives as many frames gives them back.
    lo, hi = 0.0, 4.0
    for _ in range(50):  # the smallest scale that gives at least as many frames
        mid = (lo + hi) / 2
        got = model.encode_prior(ids, Scales(0.0, mid, 0.0), None).durations.sum()
        lo, hi = (mid, hi) if got < fast.durations.sum() else (lo, mid)
    graph = model.encode_prior(ids, Scales(0.0, hi, 0.0), None)
    assert graph.durations.tolist() == fast.durations.tolist()
    assert graph.z_p is not None and fast.z_p is not None
    assert float(np.max(np.abs(graph.z_p - fast.z_p))) < 1e-5
