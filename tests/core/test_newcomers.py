"""The newcomer rule without workers: which first item may go ahead of due work."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from appliance.core.newcomers import NewcomerRule


@dataclass(order=True)
class Item:
    deadline: float
    urgent: bool = field(default=False, compare=False)
    slack_until: float | None = field(default=None, compare=False)


NOW = 100.0


def rule(first_s: float = 0.2, due_s: float = 0.2) -> NewcomerRule:
    r = NewcomerRule()
    r.first_item_s, r.due_item_s = first_s, due_s
    return r


def test_the_earliest_first_item_goes_when_nothing_is_due() -> None:
    later, sooner = Item(NOW + 1, urgent=True), Item(NOW, urgent=True)
    assert rule().pick([Item(NOW + 5, slack_until=NOW + 6), later, sooner], NOW) is sooner


@pytest.mark.parametrize(
    ("slacks", "goes"),
    [
        ([None], False),  # no audio in hand
        ([0.5], True),  # 0.2 + 0.2 fits in 0.5
        ([0.5, 0.5], False),  # 0.2 + 0.2 + 0.2 does not: each alone would
        ([0.45, 0.65], True),
        ([0.35], False),
    ],
)
def test_due_items_run_after_it_one_after_another(slacks: list[float | None], goes: bool) -> None:
    first = Item(NOW, urgent=True)
    due = [Item(NOW - 0.3, slack_until=None if s is None else NOW + s) for s in slacks]
    assert (rule().pick([*due, first], NOW) is first) == goes


def test_run_times_are_learned_by_kind() -> None:
    r = NewcomerRule()
    first, due = r.first_item_s, r.due_item_s
    r.observe(urgent=True, due=False, run_s=1.0)
    assert r.first_item_s > first and r.due_item_s == due
    r.observe(urgent=False, due=True, run_s=1.0)
    assert r.due_item_s > due
    learned = (r.first_item_s, r.due_item_s)
    r.observe(urgent=False, due=False, run_s=5.0)  # work ahead of time teaches nothing
    assert (r.first_item_s, r.due_item_s) == learned
