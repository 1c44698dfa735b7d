"""The output timeline as an object on its own (no model, no daemon): chunks numbered
and contiguous, marks and words with the chunk they fall in, stalls, deadlines."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from appliance.core import wordtimes
from appliance.core.pipeline.shape import Output
from appliance.core.pipeline.timeline import STALL_JITTER_S, Timeline
from appliance.core.pipeline.types import EncodedClause, JobStats, PendingWords, Place, Voiced
from appliance.speech import Chunk, Mark
from appliance.text.frontend import Clause, ClauseMark

RATE, HOP = 22050, 256
FRAME_MS = 1000 * HOP / RATE


def timeline(words: bool = False, stats: JobStats | None = None) -> Timeline:
    stats = stats or JobStats(t_request=time.monotonic())
    return Timeline(RATE, FRAME_MS, stats, Output(RATE, None), 0.05, words, lambda i: i == 3)


def send_all(tl: Timeline, sizes: list[int], final_last: bool = True) -> list[Chunk]:
    out: list[Chunk] = []

    async def emit(chunk: Chunk) -> None:
        out.append(chunk)

    async def run() -> None:
        for k, n in enumerate(sizes):
            last = final_last and k == len(sizes) - 1
            await tl.send(np.zeros(n, np.float32), Place((0, 1), last, last), emit)

    asyncio.run(run())
    return out


def test_chunks_are_numbered_and_contiguous_and_the_stats_follow() -> None:
    stats = JobStats(t_request=time.monotonic())
    tl = timeline(stats=stats)
    chunks = send_all(tl, [2205, 4410, 1000])
    assert [c.seq for c in chunks] == [0, 1, 2]
    assert [c.offset_ms for c in chunks] == pytest.approx([0.0, 100.0, 300.0])
    assert tl.audio_out_s == pytest.approx(7615 / RATE) == pytest.approx(stats.audio_s)
    assert stats.chunks == 3 and stats.t_first is not None and stats.stalls == 0
    assert [c.words for c in chunks] == [None, None, None]  # not asked


def test_a_mark_goes_with_the_chunk_it_falls_in_and_the_last_takes_the_rest() -> None:
    tl = timeline()
    tl.place_marks([Mark("a", 50.0), Mark("edge", 100.0), Mark("late", 10_000.0)])
    chunks = send_all(tl, [2205, 2205])
    assert [m.name for m in chunks[0].marks] == ["a"]  # 100.0 starts the next chunk
    assert [m.name for m in chunks[1].marks] == ["edge", "late"]


def test_clause_marks_are_placed_at_their_words_for_a_whole_clause_voice() -> None:
    c = Clause(
        "one two three",
        (0, 13),
        True,
        ((0, 3), (4, 7), (8, 13)),
        marks=(ClauseMark("two", 4), ClauseMark("end", 13)),
    )
    enc = EncodedClause(np.zeros(5, np.int64), None, np.zeros(26 * HOP, np.float32))
    voiced = Voiced(c, enc, [(0, 26)], 26, 40.0, {})
    tl = timeline()
    tl.place_clause_marks(voiced)
    (chunk,) = send_all(tl, [26 * HOP])
    assert [m.name for m in chunk.marks] == ["two", "end"]
    # In proportion to the characters (a voice that cannot stream has no durations).
    assert chunk.marks[0].offset_ms == pytest.approx(40.0 + 4 / 13 * 26 * FRAME_MS)
    assert chunk.marks[1].offset_ms == pytest.approx(40.0 + 26 * FRAME_MS)


def test_pending_words_are_placed_once_when_found() -> None:
    tl = timeline(words=True)
    words = [wordtimes.WrittenWord((0, 3), 0, 4), wordtimes.WrittenWord((4, 7), 5, 9)]
    work = wordtimes.WordWork.of("one two", ((0, 3), (4, 7)), [0, 1, 0, 3, 0, 1, 0], _Kinds())

    def at(p: int, _: bool) -> float:
        return p * 10.0

    tl.pending = PendingWords(work, at, lambda w: w.start > 0)
    tl.place_pending(None)  # the item carried none: still pending
    assert tl.pending is not None
    tl.place_pending(words)
    tl.place_pending(words)  # already placed: nothing more
    assert tl.pending is None
    (chunk,) = send_all(tl, [RATE])
    assert chunk.words is not None and [w.text_span for w in chunk.words] == [(4, 7)]
    assert chunk.words[0].offset_ms == 50.0 and chunk.words[0].duration_ms == 40.0


def test_a_word_within_half_a_frame_of_the_end_starts_the_next_chunk() -> None:
    tl = timeline(words=True)
    edge = 100.0 - FRAME_MS / 2
    spans = [(0, 1), (2, 3)]
    firsts = [edge - 0.01, edge + 0.01]
    tl.place_words(
        [wordtimes.WrittenWord(s, k, k + 1) for k, s in enumerate(spans)],
        lambda p, start: firsts[p] if start and p < 2 else 150.0,
    )
    a, b = send_all(tl, [2205, 2205])
    assert [w.text_span for w in a.words or ()] == [(0, 1)]
    assert [w.text_span for w in b.words or ()] == [(2, 3)]


def test_a_chunk_after_the_listener_ran_dry_is_a_stall() -> None:
    stats = JobStats(t_request=time.monotonic())
    tl = timeline(stats=stats)
    assert tl.due() <= time.monotonic() and tl.slack_until() is None and tl.buffer_s() == 0.0
    send_all(tl, [220], final_last=False)  # 10 ms of audio
    assert tl.due() == pytest.approx(stats.t_first + 0.01 - 0.05)  # type: ignore[operator]
    time.sleep(0.01 + STALL_JITTER_S + 0.05)
    send_all(tl, [220], final_last=False)
    assert stats.stalls == 1


def test_before_the_first_chunk_audio_ahead_is_due_as_if_playing_began_now() -> None:
    """Watermark 0.05 s: a clause 2 s past the first is due 1.95 s from now; one within
    the watermark is due now."""
    tl = timeline(stats=JobStats(t_request=time.monotonic()))
    t0 = time.monotonic()
    assert t0 + 1.95 <= tl.due(2.0) <= time.monotonic() + 1.95
    assert tl.due(0.03) <= time.monotonic()


class _Kinds:
    """Id kinds of a toy voice: 0 a pad, 1 a sound, 3 a word gap."""

    def string(self, ids: list[int]) -> bytes:
        from appliance.text.phonemize import ID_PAD, ID_SOUND, ID_SPACE

        return b"".join({0: ID_PAD, 1: ID_SOUND, 3: ID_SPACE}[i] for i in ids)
