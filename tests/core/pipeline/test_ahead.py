"""The clauses a request encodes ahead, without a scheduler: how many, when each is due,
and what is taken or cancelled."""

from __future__ import annotations

import asyncio

import pytest

from appliance.core.pipeline.ahead import CHAR_S, PREFETCH_DEPTH, PREFETCH_HOLD_S, ClausesAhead
from appliance.core.pipeline.clauses import ClauseQueue
from appliance.text.frontend import Clause


def clause(text: str) -> Clause:
    return Clause(text, (0, len(text)), True, ((0, len(text)),))


class Submitted:
    """The encodes submitted: each clause's text and due seconds, and its future."""

    def __init__(self) -> None:
        self.due: list[tuple[str, float]] = []
        self.futures: list[asyncio.Future[object]] = []

    def __call__(self, c: Clause, due_s: float) -> asyncio.Future[object]:
        self.due.append((c.text, due_s))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def ahead_of(texts: list[str], lone: bool) -> tuple[ClausesAhead, Submitted]:
    submitted = Submitted()
    return ClausesAhead(ClauseQueue([clause(t) for t in texts]), submitted, lambda: lone), submitted


@pytest.mark.parametrize(("lone", "depth"), [(True, PREFETCH_DEPTH), (False, 1)])
async def test_alone_two_clauses_ahead_the_second_due_once_the_first_has_played(
    lone: bool, depth: int
) -> None:
    ahead, submitted = ahead_of(["One two.", "Three four five.", "Six."], lone)
    ahead.fill(2.0, first_chunks=False, per_char=None)
    assert submitted.due == [("One two.", 2.0), ("Three four five.", 2.0 + 8 * CHAR_S)][:depth]
    assert len(ahead) == depth
    ahead.fill(2.0, first_chunks=False, per_char=None)  # full: nothing more
    assert len(submitted.due) == depth


async def test_the_requests_own_rate_times_the_second_once_known() -> None:
    ahead, submitted = ahead_of(["One two.", "Three."], lone=True)
    ahead.fill(1.0, first_chunks=False, per_char=0.1)
    assert submitted.due == [("One two.", 1.0), ("Three.", pytest.approx(1.0 + 8 * 0.1))]


@pytest.mark.parametrize(("lone", "held"), [(False, True), (True, False)])
async def test_a_long_first_clause_holds_its_next_beside_other_work_only(
    lone: bool, held: bool
) -> None:
    ahead, submitted = ahead_of(["Next."], lone)
    ahead.fill(PREFETCH_HOLD_S + 0.5, first_chunks=True, per_char=None)
    assert (submitted.due == []) == held
    ahead.fill(PREFETCH_HOLD_S + 0.5, first_chunks=False, per_char=None)  # after chunk two
    assert [t for t, _ in submitted.due] == ["Next."]


async def test_only_the_next_clause_is_taken_and_the_rest_cancelled_at_the_end() -> None:
    ahead, submitted = ahead_of(["One.", "Two."], lone=True)
    ahead.fill(1.0, first_chunks=False, per_char=None)
    first = ahead.peek()
    assert first is not None and first.text == "One."
    assert ahead.take(clause("One.")) is None  # another clause with the same text
    assert ahead.take(first) is submitted.futures[0]
    ahead.cancel()
    assert not submitted.futures[0].cancelled() and submitted.futures[1].cancelled()


@pytest.mark.parametrize("lone", [True, False])
async def test_alone_the_next_clause_is_encoded_beside_the_first_due_after_its_audio(
    lone: bool,
) -> None:
    ahead, submitted = ahead_of(["Three four five.", "Six."], lone)
    ahead.open(clause("One two."))
    assert submitted.due == ([("Three four five.", 8 * CHAR_S)] if lone else [])
    ahead.open(clause("One two."))  # one at most
    assert len(submitted.due) == (1 if lone else 0)
    ahead.fill(1.0, first_chunks=False, per_char=None)  # after the first chunk: the rest
    assert [t for t, _ in submitted.due] == ["Three four five.", "Six."][: 2 if lone else 1]
