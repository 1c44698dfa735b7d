"""The start strategies as functions: the quick start's worker half on the bundled
voice, its loop half through a host made of the real timeline and output stages."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from appliance.core.chunkplan import QUICK_MAX_MS
from appliance.core.pipeline import encode
from appliance.core.pipeline.shape import Output, Shaped, joined
from appliance.core.pipeline.start import JoinWords, QuickStart, choose
from appliance.core.pipeline.timeline import Timeline
from appliance.core.pipeline.types import (
    Emit,
    EncodedClause,
    JobStats,
    Place,
    VoiceCosts,
    Voiced,
    VoiceRuntime,
)
from appliance.core.scheduler import WorkTiming
from appliance.core.wordtimes import WrittenWord
from appliance.speech import Chunk
from tests.core.pipeline.stages import BARE, clause_of, context


def pinned(voice: VoiceRuntime, prior_s_per_id: float) -> VoiceRuntime:
    """The voice with its cost estimate pinned (a quiet two-core box: ~1e-4 s per id)."""
    return dataclasses.replace(voice, costs=VoiceCosts(prior_s_per_id, 0.008))


@pytest.mark.parametrize(
    ("settings", "quick"),
    [
        ({}, True),
        ({"quick_start": False}, False),  # the config's switch
        ({"deterministic": True}, False),  # its choice depends on timing
        ({"realtime": False}, False),  # nobody waits for a batch request's first sound
        ({"mode": "sentence"}, False),  # one chunk a sentence, as Piper
    ],
)
def test_a_quick_start_only_where_a_listener_waits(
    voice: VoiceRuntime, settings: dict[str, object], quick: bool
) -> None:
    assert isinstance(choose(context(voice, **settings)), QuickStart) is quick


def test_the_quick_opening_joins_at_a_word_gap_within_250_ms(voice: VoiceRuntime) -> None:
    ctx = context(pinned(voice, 1e-4))
    clause = clause_of(BARE)
    ids = encode.clause_ids(ctx, clause)
    take = QuickStart().open(ctx, clause, ids)
    assert take is not None
    assert voice.phonemizer.is_space(int(ids[take.seam - 2]))  # right before a word
    assert take.frames * ctx.frame_ms <= QUICK_MAX_MS
    assert len(take.audio) + len(take.tail) == take.frames * voice.hop
    assert len(take.tail) == ctx.fade and take.decode_s > 0
    np.testing.assert_array_equal(take.ids[: take.seam], ids[: take.seam])  # shared ids


def test_no_quick_opening_where_it_cannot_pay(voice: VoiceRuntime) -> None:
    clause = clause_of(BARE)
    ids = encode.clause_ids(context(voice), clause)
    quick = QuickStart()
    assert quick.open(context(pinned(voice, 1e-4), crowded=True), clause, ids) is None
    assert quick.open(context(pinned(voice, 1e-2)), clause, ids) is None  # prior too slow
    short = clause_of("Turn on the kitchen lights.")
    ctx = context(pinned(voice, 1e-4))
    assert quick.open(ctx, short, encode.clause_ids(ctx, short)) is None


def test_a_join_splits_the_words_where_their_sound_is() -> None:
    join = JoinWords(seam=10)
    heard = WrittenWord((0, 3), 1, 5)
    cut = WrittenWord((4, 8), 6, 12)  # sound on both sides: the join cut it (at a stop)
    next_ = WrittenWord((9, 12), 9, 14)  # only its pad before the join
    assert [join.before(w) for w in (heard, cut, next_)] == [True, True, False]
    assert [join.after(w) for w in (heard, cut, next_)] == [False, False, True]
    at = join.after_time(lambda p, start: p * 10.0, heard_end_ms=115.0)
    assert at(9, True) == 115.0  # no earlier than the cut word's end, nor the join
    assert at(9, False) == 100.0 and at(12, True) == 120.0


class Host:
    """The loop half's host from the real stages; work runs on a thread, due at once."""

    def __init__(self, ctx: encode.EncodeContext) -> None:
        v = ctx.voice
        self.ctx = ctx
        self.stats = JobStats(t_request=time.monotonic())
        self.output = Output(v.sample_rate, None)
        self.timeline = Timeline(
            v.sample_rate, ctx.frame_ms, self.stats, self.output, 0.05, False, lambda _: False
        )
        self.target = ctx.plan.first_target
        self.grown: list[int] = []

    def submit(self, fn: Callable[[], Any], kind: str, later_s: float = 0.0) -> asyncio.Future[Any]:
        async def run() -> tuple[Any, WorkTiming]:
            return await asyncio.to_thread(fn), WorkTiming(0.0, 0.0, 0.0, False)

        return asyncio.ensure_future(run())

    async def send(self, shaped: Shaped, place: Place, emit: Emit) -> None:
        await self.timeline.send(self.output.render(shaped, place.final), place, emit)

    def plan(self, clause: Any, encoded: EncodedClause, start: int = 0) -> Voiced:
        assert encoded.enc is not None
        chunks, self.target = encode.plan_clause(
            self.ctx, clause, encoded.ids, encoded.enc, self.target, False, start
        )
        return Voiced(clause, encoded, chunks, encoded.enc.frames, 0.0)

    def grow(self, frames: int) -> None:
        self.grown.append(frames)
        self.target = max(self.target, 2 * frames)


def test_the_whole_sentence_takes_over_at_the_join(voice: VoiceRuntime) -> None:
    """The loop half sends the quick chunk and hands back the rest planned from the
    join: crossfaded there, every sample after it is the whole sentence's."""
    ctx = context(pinned(voice, 1e-4))
    clause = clause_of(BARE)
    encoded = encode.encode_first(ctx, clause, ctx.plan.first_target, QuickStart())
    take = encoded.opening
    assert take is not None and encoded.enc is None
    host = Host(ctx)
    sent: list[Chunk] = []

    async def emit(chunk: Chunk) -> None:
        sent.append(chunk)

    voiced = asyncio.run(QuickStart().play(host, clause, encoded, emit))
    assert host.stats.quick_start and host.stats.windows == 1
    (first,) = sent
    assert first.duration_ms * voice.sample_rate / 1000 == len(take.audio)
    assert host.grown == [take.frames]  # the chunks after it grow from its size
    enc = voiced.encoded.enc
    assert enc is not None and voiced.seam > 0 and voiced.lead is take.tail
    assert voiced.chunks[0][0] == voiced.seam and voiced.chunks[-1][1] == enc.frames
    # The join frame sounds right after the quick audio and its tail.
    tail_ms = len(take.tail) / voice.sample_rate * 1000
    assert voiced.at_ms(voiced.seam, ctx.frame_ms, lambda _: False) == pytest.approx(
        first.duration_ms + tail_ms
    )
    a, b = voiced.chunks[0]
    after = joined(take.tail, encode.decode(ctx, enc, a - 1, b, None)[0], voice.hop)
    whole = voice.model.fused(encode.clause_ids(ctx, clause), ctx.settings.scales, None)
    n = len(take.tail)
    np.testing.assert_allclose(after[n:], whole[a * voice.hop : b * voice.hop], atol=1e-4)
