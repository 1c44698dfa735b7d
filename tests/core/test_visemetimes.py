"""Viseme timings: the track's tiling (no model), and through the object ``Runtime.load``
builds, the quick start's join: the visemes follow it as word timings do."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.core.visemetimes import VisemeTrack
from appliance.ops.config import parse_config
from appliance.speech import Chunk, SpeechRequest, Viseme
from appliance.text.phonemize import IdKinds
from appliance.text.visemes import NEXT, PREVIOUS, SIL, VISEMES, VisemeTable

PP, AA, E = VISEMES.index("PP"), VISEMES.index("aa"), VISEMES.index("E")
# A voice of eight ids: ^ _ m æ p ' ' $ ː (begin, pad, three phonemes, gap, end, length).
BEGIN, PAD, M, AE, P, GAP, END, LONG = range(8)
KINDS = IdKinds.of(8, space={GAP}, silent={BEGIN, PAD, GAP, END}, pad={PAD})
TABLE = VisemeTable(bytes([SIL, NEXT, PP, AA, PP, SIL, SIL, PREVIOUS]).ljust(256, b"\0"))


def track() -> VisemeTrack:
    return VisemeTrack(TABLE, KINDS)


def ids(*seq: int) -> np.ndarray:
    return np.array(seq, dtype=np.int64)


def at_10ms(p: int, _start: bool) -> float:
    return 10.0 * p


def spans(visemes: tuple[Viseme, ...]) -> list[tuple[str, float, float]]:
    return [(VISEMES[v.viseme], v.offset_ms, v.duration_ms) for v in visemes]


def test_pads_start_the_next_phoneme_and_length_marks_lengthen_the_last() -> None:
    t = track()  # "mæːp", then a gap: the word is [1, 9), its pad to its last sound
    t.place(ids(BEGIN, PAD, M, PAD, AE, LONG, PAD, P, PAD, GAP, END), at_10ms)
    got = spans(t.take(0.0, 120.0, everything=True))
    assert got == [
        ("sil", 0.0, 10.0),
        ("PP", 10.0, 20.0),
        ("aa", 30.0, 30.0),
        ("PP", 60.0, 20.0),
        ("sil", 80.0, 40.0),
    ]


def test_chunks_take_exactly_their_span_and_a_shape_goes_on_across_an_edge() -> None:
    t = track()
    t.place(ids(BEGIN, PAD, M, PAD, AE, PAD, GAP, PAD, P, PAD, END), at_10ms)
    first = t.take(0.0, 45.0, everything=False)
    second = t.take(45.0, 110.0, everything=True)
    assert spans(first) == [("sil", 0.0, 10.0), ("PP", 10.0, 20.0), ("aa", 30.0, 15.0)]
    assert spans(second) == [
        ("aa", 45.0, 5.0),
        ("sil", 50.0, 20.0),
        ("PP", 70.0, 20.0),
        ("sil", 90.0, 20.0),
    ]
    for chunk, (a, b) in ((first, (0.0, 45.0)), (second, (45.0, 110.0))):
        assert chunk[0].offset_ms == a
        assert sum(v.duration_ms for v in chunk) == pytest.approx(b - a)


def test_a_chunk_runs_the_track_only_as_far_as_it_reaches() -> None:
    asked: list[int] = []

    def at(p: int, start: bool) -> float:
        asked.append(p)
        return 10.0 * p

    t = track()
    t.place(ids(BEGIN, *([PAD, M, PAD, AE, GAP] * 40), END), at)
    t.take(0.0, 30.0, everything=False)
    assert max(asked) < 12  # a few ids past the chunk, not the clause's 200


def test_a_placement_takes_the_words_its_side_of_a_join_keeps() -> None:
    t = track()  # two words, [1, 5) and [6, 10); the join keeps the second only
    seq = ids(BEGIN, PAD, M, PAD, AE, GAP, PAD, P, PAD, AE, END)
    t.place(seq, at_10ms, lambda w: w.start >= 6)
    got = spans(t.take(0.0, 120.0, everything=True))
    assert got == [("sil", 0.0, 60.0), ("PP", 60.0, 20.0), ("aa", 80.0, 20.0), ("sil", 100.0, 20.0)]


def test_a_word_timed_before_the_last_ones_end_cuts_it_short() -> None:
    """Across a join the next encoding may time a word's start a frame before the end of
    the word before (timed by the quick encoding): the earlier shape ends there."""
    t = track()
    t.place(ids(BEGIN, PAD, M, END), at_10ms)  # PP 10–30
    first = t.take(0.0, 25.0, everything=False)
    t.place(ids(BEGIN, PAD, AE, END), lambda p, _: 26 + 2 * p)  # aa 28–32
    second = t.take(25.0, 60.0, everything=True)
    assert spans(first) == [("sil", 0.0, 10.0), ("PP", 10.0, 15.0)]
    assert spans(second) == [("PP", 25.0, 3.0), ("aa", 28.0, 4.0), ("sil", 32.0, 28.0)]


BARE = (
    "The maintenance crew repainted every railing along the northern pier before the "
    "storm season arrived in late October."
)


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    """The object the daemon builds (each core test module holds its own, as test_runtime)."""
    rt = Runtime.load(
        parse_config(
            {
                "voices": {"cache_dir": str(voice_cache)},
                "engine": {"workers": 1, "intra_op_threads": 2},
            }
        )
    )
    yield rt
    rt.close()


def _stream(runtime: Runtime, req: SpeechRequest) -> tuple[list[Chunk], dict[str, object]]:
    costs = runtime.voices[runtime.default_voice].costs
    saved = (costs.prior_s_per_id, costs.first_decode_s)
    # Pinned as a quiet box measures them, so the first sentence starts quick.
    costs.prior_s_per_id, costs.first_decode_s = 1e-4, 0.008

    async def run() -> tuple[list[Chunk], dict[str, object]]:
        stream = await Service(runtime).open_stream(req, door="test")
        chunks: list[Chunk] = []

        async def emit(chunk: Chunk) -> None:
            chunks.append(chunk)

        result = await stream.run(emit)
        return chunks, result.stats

    try:
        return asyncio.run(run())
    finally:
        costs.prior_s_per_id, costs.first_decode_s = saved


@pytest.mark.parametrize("speed", [1.0, 2.0, 3.0])
def test_visemes_follow_a_quick_starts_join_as_words_do(runtime: Runtime, speed: float) -> None:
    """Around the join, visemes tile each chunk and the request; every sounding one lies
    inside a word (to a frame), and every word is mostly sounding visemes."""
    req = SpeechRequest(
        text=BARE, noise_scale=0.0, noise_w=0.0, speed=speed, word_timings=True, visemes=True
    )
    chunks, stats = _stream(runtime, req)
    assert stats["quick_start"]
    seq = [v for c in chunks for v in c.visemes or ()]
    for c in chunks:
        assert c.visemes and c.visemes[0].offset_ms == pytest.approx(c.offset_ms, abs=1e-6)
        total = sum(v.duration_ms for v in c.visemes)
        assert total == pytest.approx(c.duration_ms, abs=1e-6)
    assert all(a.offset_ms < b.offset_ms for a, b in itertools.pairwise(seq))
    words = [w for c in chunks for w in c.words or ()]
    frame_ms = 256 / 22050 * 1000
    for v in seq:
        if v.viseme == SIL:
            continue
        mid = v.offset_ms + v.duration_ms / 2
        assert any(
            w.offset_ms - frame_ms <= mid <= w.offset_ms + w.duration_ms + frame_ms for w in words
        ), v
    for w in words:
        inside = sum(
            max(
                0.0,
                min(v.offset_ms + v.duration_ms, w.offset_ms + w.duration_ms)
                - max(v.offset_ms, w.offset_ms),
            )
            for v in seq
            if v.viseme != SIL
        )
        assert inside >= 0.7 * w.duration_ms, (w, inside)


def test_visemes_alone_are_the_same_and_cost_no_word_work(runtime: Runtime) -> None:
    """Without word timings the visemes are the same (they need no written word), and the
    first packet waits for no word work."""
    base = SpeechRequest(text=BARE, noise_scale=0.0, noise_w=0.0, visemes=True)
    alone, stats = _stream(runtime, base)
    both, with_words = _stream(runtime, dataclasses.replace(base, word_timings=True))
    assert stats["quick_start"] and all(c.words is None for c in alone)
    assert "words" not in stats["ttfp_parts_ms"]  # type: ignore[operator]
    # What the first packet waited for, counted (a generous bound: the goal is 0.5 ms).
    assert 0 < stats["ttfp_parts_ms"]["visemes"] < 20  # type: ignore[index]
    assert "words" in with_words["ttfp_parts_ms"]  # type: ignore[operator]
    assert [c.visemes for c in alone] == [c.visemes for c in both]
