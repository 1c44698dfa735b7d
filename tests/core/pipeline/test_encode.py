"""The worker stage as functions on the bundled voice (no daemon, no scheduler): encoded,
planned and decoded chunk by chunk, a clause is piper's whole-sentence audio."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from appliance.core.pipeline import encode
from appliance.core.pipeline.types import EncodedClause, VoiceRuntime
from appliance.speech import FloatArray
from tests.core.pipeline.stages import BARE, COMMITTEE, clause_of, context


def fused(voice: VoiceRuntime, ctx: encode.EncodeContext, text: str) -> FloatArray:
    ids = encode.clause_ids(ctx, clause_of(text))
    return voice.model.fused(ids, ctx.settings.scales, None)


def rest(ctx: encode.EncodeContext, out: EncodedClause, chunks: list[tuple[int, int]]) -> list:
    assert out.enc is not None
    return [encode.decode(ctx, out.enc, a, b, None)[0] for a, b in chunks]


@pytest.mark.parametrize("crowded", [False, True])
def test_a_later_clause_encoded_planned_and_decoded_is_the_whole_sentence(
    voice: VoiceRuntime, crowded: bool
) -> None:
    """Crowded or not (one core and nothing decoded ahead, or not), the same samples."""
    ctx = context(voice, crowded)
    clause = clause_of(BARE)
    out = encode.encode_clause(ctx, clause)
    assert out.enc is not None and out.enc.ready == out.enc.frames  # prior and flow, whole
    assert out.chunks is None and out.first_audio is None and out.written is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.chunks = []  # type: ignore[misc]
    chunks, _ = encode.plan_clause(ctx, clause, out.ids, out.enc, 16, first=False)
    assert len(chunks) > 2 and chunks[-1][1] == out.enc.frames
    got = np.concatenate(rest(ctx, out, chunks))
    want = fused(voice, ctx, BARE)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4


@pytest.mark.parametrize(
    ("crowded", "deterministic", "offers"), [(False, False, 1), (True, False, 1), (False, True, 0)]
)
def test_a_long_later_clause_s_flow_offers_half_to_another_core(
    voice: VoiceRuntime, crowded: bool, deterministic: bool, offers: int
) -> None:
    """Encoded ahead, a long clause's flow is two halves, one offered to another core
    (``Scheduler.beside``, which gives it away only while the request has all the work
    there is, so crowded or not); in ``deterministic`` mode it is one run on the item's
    own.  The audio is the whole sentence's either way."""
    offered: list[Callable[[], FloatArray]] = []

    def beside(run: Callable[[], FloatArray], *, wait: bool = False) -> Callable[[], FloatArray]:
        if wait:  # a flow this long is offered even while the other core is busy
            offered.append(run)
        return lambda: run()  # taken: its result comes from "the other core"

    ctx = dataclasses.replace(context(voice, crowded, deterministic=deterministic), beside=beside)
    clause = clause_of(COMMITTEE)
    out = encode.encode_clause(ctx, clause)
    assert out.enc is not None and out.enc.ready == out.enc.frames
    assert len(offered) == offers
    got = np.concatenate(rest(ctx, out, [(0, out.enc.frames)]))
    want = fused(voice, ctx, COMMITTEE)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4


def test_a_first_clause_comes_planned_with_its_first_chunk(voice: VoiceRuntime) -> None:
    """One item: the prior, the plan and the first chunk (its flow over that chunk's
    frames only); the rest decoded later joins it sample for sample."""
    ctx = context(voice)
    clause = clause_of(BARE)
    out = encode.encode_first(ctx, clause, ctx.plan.first_target, None)
    assert out.enc is not None and out.chunks and out.first_audio is not None
    a, b = out.chunks[0]
    assert a == 0 and ctx.plan.first_min <= b <= ctx.plan.first_max
    assert len(out.first_audio) == b * voice.hop and out.first_decode_s > 0
    assert out.enc.ready < out.enc.frames  # the flow ran over the first window only
    got = np.concatenate([out.first_audio, *rest(ctx, out, out.chunks[1:])])
    want = fused(voice, ctx, BARE)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4


def test_a_first_clause_finds_its_first_chunks_words_and_the_rest_later(
    voice: VoiceRuntime,
) -> None:
    """The words its first chunk may carry are found in the item (each as the whole
    clause's alignment has it); the rest with the next chunk's item (``decode``)."""
    ctx = context(voice, word_timings=True)
    clause = clause_of(COMMITTEE)
    first = encode.encode_first(ctx, clause, ctx.plan.first_target, None)
    later = encode.encode_clause(ctx, clause)
    assert later.written is not None and later.words_left is None
    assert first.written is not None and first.words_left is not None
    assert 0 < len(first.written) < len(later.written) // 2
    assert first.written == later.written[: len(first.written)]
    position = encode.first_chunk_ids(first)
    assert position is not None and first.written[-1].start < position
    assert first.enc is not None and first.chunks
    a, b = first.chunks[1]
    _, words = encode.decode(ctx, first.enc, a, b, first.words_left)
    assert words == later.written
    assert first.words_s > 0


@pytest.mark.parametrize(
    ("settings", "crowded", "urgent"),
    [
        ({}, False, True),
        ({}, True, False),  # a burst: the cheapest decoder, one core
        ({"mode": "sentence"}, False, False),  # a whole-sentence chunk, as Piper
        ({"realtime": False}, False, False),  # a batch request
        ({"deterministic": True}, False, False),  # the same decoder every time
    ],
)
def test_only_a_streamed_first_chunk_nobody_competes_with_is_urgent(
    voice: VoiceRuntime, settings: dict[str, object], crowded: bool, urgent: bool
) -> None:
    assert encode.urgent_decode(context(voice, crowded, **settings)) is urgent
