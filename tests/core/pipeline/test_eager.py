"""The eager start as functions: a draft's encoding on the bundled voice (where it may be
played to, where another may join it), and its loop half through a host made of the real
timeline and output, handing over to the whole sentence sample for sample."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import numpy as np
import pytest

from appliance.core.pipeline import eager, encode
from appliance.core.pipeline.clauses import ClauseQueue, Draft
from appliance.core.pipeline.shape import joined
from appliance.core.pipeline.types import Emit, VoiceRuntime
from appliance.speech import Chunk
from tests.core.pipeline.stages import BARE, COMMITTEE, clause_of, context
from tests.core.pipeline.test_start import Host


def test_a_draft_is_played_up_to_the_gap_before_its_last_word(voice: VoiceRuntime) -> None:
    """ "… leaves at 3:" may be said up to "at" (its last word may still be growing); its
    first chunk is decoded with it, on the same work item."""
    ctx = context(voice)
    text = "The train to Boston leaves at 3:"
    take = eager.take_draft(ctx, Draft(1, clause_of(text)), opening=True)
    assert take is not None and not take.final
    played = take.keys[: take.playable]
    assert played[-1] == text.index(" 3:")  # the end of "at"
    assert all(text[k] == " " for k in played)  # each key ends a written word
    assert take.first is not None and take.first_to >= 0
    assert len(take.first) == take.frames[take.first_to] * voice.hop


def test_no_gap_inside_a_written_word_is_a_join(voice: VoiceRuntime) -> None:
    """A number read as several words ("3:30" → "three thirty") and words espeak runs
    together ("on a") have no join inside them: a join has the same written words before it
    in every encoding."""
    ctx = context(voice)
    text = "The train leaves at 3:30 pm from platform 9."
    whole = eager.take_whole(ctx, clause_of(text))
    assert whole.final and whole.playable == len(whole.seams)
    assert text.index("3:30") + 2 not in whole.keys  # between "three" and "thirty"
    assert list(whole.keys) == sorted(set(whole.keys))
    committee = eager.take_whole(ctx, clause_of(COMMITTEE))
    draft = eager.take_draft(ctx, Draft(1, clause_of(COMMITTEE[:60])), opening=False)
    assert draft is not None
    assert set(draft.keys[: draft.playable]) <= set(committee.keys) | {COMMITTEE.index(" on")}


HEADS = (
    "In the middle of the night the dog started barking.",
    "At the end of the road there is an old red barn.",
    "Over the last few weeks the river has risen steadily.",
)


def _played_ratio(ctx: encode.EncodeContext, text: str, words: int) -> float:
    """How long a draft of ``text``'s first ``words`` words takes to its last playable gap,
    against the whole sentence to the same gap."""
    whole = eager.take_whole(ctx, clause_of(text))
    head = " ".join(text.split()[:words])
    draft = eager.take_draft(ctx, Draft(1, clause_of(head)), opening=False)
    assert draft is not None and draft.playable > 0
    key = draft.keys[draft.playable - 1]
    return draft.frames[draft.playable - 1] / whole.frames[whole.keys.index(key)]


def test_a_draft_is_read_as_a_sentence_that_goes_on(
    voice: VoiceRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft ending at its last word was read as a short sentence's end: its first words
    ~10 % slower than in the whole sentence, and a sentence started from drafts came out
    longer than piper's.  Followed by the sequel (never played: it is past the last written
    word), they last about as long as in the whole sentence."""
    ctx = context(voice)
    draft = eager.take_draft(ctx, Draft(1, clause_of("In the middle of")), opening=False)
    assert draft is not None
    assert len(draft.enc.durations) > len(draft.ids)  # encoded with the sequel
    assert draft.ids.tolist() == encode.clause_ids(ctx, clause_of("In the middle of")).tolist()
    drafts = [(text, words) for text in HEADS for words in (3, 4, 5, 6)]
    with_sequel = [_played_ratio(ctx, text, words) for text, words in drafts]
    monkeypatch.setattr(eager, "SEQUELS", {})
    alone = [_played_ratio(ctx, text, words) for text, words in drafts]
    # One draft may be a few % off either way; on average they last as the whole's.
    assert abs(statistics.mean(with_sequel) - 1) <= 0.03, with_sequel
    assert statistics.mean(abs(r - 1) for r in with_sequel) <= 0.05, with_sequel
    assert statistics.mean(alone) >= 1.07, alone


class EagerHost(Host):
    """The start strategies' host with what the eager start also asks: the clause queue,
    a listener that always holds 0.2 s (so provisional audio goes out up to its limit),
    and a signal when the audio waits for text."""

    def __init__(self, ctx: encode.EncodeContext, queue: ClauseQueue) -> None:
        super().__init__(ctx)
        self.clauses = queue
        self.joins_in = False
        self.stuck = asyncio.Event()

    def buffer_s(self) -> float:
        return 0.2

    def waiting_for_text(self) -> None:
        self.stuck.set()

    async def idle(self, timeout: float | None, emit: Emit) -> None:
        await self.clauses.changed(timeout)


def test_the_whole_sentence_takes_over_a_draft_at_its_word_gap(voice: VoiceRuntime) -> None:
    """A draft of BARE's first words is said up to the gap before its last one and waits
    there; when the sentence's clause comes, the rest is the whole sentence's audio from
    that gap, crossfaded at the join."""
    ctx = context(voice)
    words = BARE.split(" ")
    head = " ".join(words[:9])  # "… broken escalator on": says up to "escalator"
    queue = ClauseQueue(closed=False)
    queue.put_draft(clause_of(head))
    host = EagerHost(ctx, queue)
    sent: list[Chunk] = []

    async def emit(chunk: Chunk) -> None:
        sent.append(chunk)

    async def run() -> Any:
        assert queue.draft is not None
        playing = asyncio.create_task(eager.EagerStart().play(host, queue.draft, emit))
        await asyncio.wait_for(host.stuck.wait(), 60)
        queue.put([clause_of(BARE)])
        return await asyncio.wait_for(playing, 60)

    clause, voiced = asyncio.run(run())
    assert clause.text == BARE and host.stats.eager_encodes >= 1
    assert sent and max(c.text_span[1] for c in sent) == head.rindex(" on")
    enc = voiced.encoded.enc
    assert enc is not None and voiced.seam > 0 and voiced.lead is not None
    a, b = voiced.chunks[0]
    after = joined(voiced.lead, encode.decode(ctx, enc, a - 1, b, None)[0], voice.hop)
    whole = voice.model.fused(encode.clause_ids(ctx, clause), ctx.settings.scales, None)
    n = len(voiced.lead)
    np.testing.assert_allclose(after[n:], whole[a * voice.hop : b * voice.hop], atol=1e-4)


class ListenerHost(EagerHost):
    """An eager host whose listener holds what the test says."""

    def __init__(self, ctx: encode.EncodeContext, queue: ClauseQueue) -> None:
        super().__init__(ctx, queue)
        self.held_s = 0.2

    def buffer_s(self) -> float:
        return self.held_s


def test_a_longer_draft_is_encoded_when_the_playhead_needs_it(voice: VoiceRuntime) -> None:
    """Text comes far faster than it is spoken: a draft one word longer is not encoded
    while enough audio is left (it was often made and never played), one two words longer
    is; once the listener is about to run dry, any longer draft is."""
    ctx = context(voice)
    words = BARE.split(" ")
    queue = ClauseQueue(closed=False)
    queue.put_draft(clause_of(" ".join(words[:9])))
    host = ListenerHost(ctx, queue)

    async def emit(chunk: Chunk) -> None:
        pass

    async def encodes_after(n: int, held_s: float, expect: int) -> int:
        """Encodings made once a draft of ``n`` words is known (waiting up to 10 s for
        ``expect`` of them, 0.3 s when none more is expected)."""
        host.held_s = held_s
        before = host.stats.eager_encodes
        queue.put_draft(clause_of(" ".join(words[:n])))
        for _ in range(1000 if expect > before else 30):
            if host.stats.eager_encodes >= expect > before:
                break
            await asyncio.sleep(0.01)
        return host.stats.eager_encodes

    async def run() -> list[int]:
        assert queue.draft is not None
        playing = asyncio.create_task(eager.EagerStart().play(host, queue.draft, emit))
        await asyncio.wait_for(host.stuck.wait(), 60)  # all of the draft's words are sent
        between = (eager.URGENT_LEFT_S + eager.REENCODE_LEFT_S) / 2
        got = [host.stats.eager_encodes, await encodes_after(10, between, 1)]
        got.append(await encodes_after(11, between, 2))
        got.append(await encodes_after(12, eager.URGENT_LEFT_S / 2, 3))
        queue.put([clause_of(BARE)])
        await asyncio.wait_for(playing, 60)
        return got

    assert asyncio.run(run()) == [1, 1, 2, 3]
