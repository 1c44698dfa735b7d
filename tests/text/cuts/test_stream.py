"""Where a text that streams in is cut (appliance.text.cuts.stream): the release rule,
table-driven, its sentence cuts, and an eager start's draft and idle cuts.  No daemon: the
text feed that applies the rule on the real daemon is tested in tests/core/test_textstream.py."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.text.cuts import stream as textstream
from appliance.text.cuts.stream import Occasion, SegmentRule, release_point

RULE = SegmentRule(first_chars=40, max_chars=250, idle_ms=300)


@pytest.mark.parametrize(
    ("pending", "first", "released"),
    [
        # a sentence end followed by whitespace: released without the next sentence
        ("Hello there. How", True, "Hello there."),
        ("Hello there. ", False, "Hello there."),
        ("Wow! Really? And", False, "Wow! Really?"),
        # a sentence end nothing can undo is released as it arrives (issue 28) ...
        ("Hello there.", True, "Hello there."),
        ("Wow!", False, "Wow!"),
        ("Really?", True, "Really?"),
        ('He said "Hi."', True, 'He said "Hi."'),
        ("Is it (really?)", True, "Is it (really?)"),
        # ... an ambiguous one waits for the whitespace (it might be "3.50", "Dr. Smith")
        ("It costs 3.", True, ""),
        ("Ask Dr.", True, ""),
        ("Made in the U.S.", True, ""),
        ("Fruit, e.g.", True, ""),
        ("By J.", True, ""),
        ("Apples, pears, etc.", True, ""),
        ("Wait..", True, ""),
        ("Wait...", True, ""),
        ("See example.", True, "See example."),
        ("Open https://x.org/a?", True, ""),
        ("It costs 3.50 now. Then", True, "It costs 3.50 now."),
        # abbreviations, times, money are never cut
        ("Dr. Smith is", True, ""),
        ("Call Dr. Smith. Now", True, "Call Dr. Smith."),
        ("e.g. this one", True, ""),
        ("We talked about apples, pears, etc. and", False, ""),
        ("At 3:30 pm we go. Later", True, "At 3:30 pm we go."),
        ("That is $3.50 for it", True, ""),
        ("Mr. and Mrs. Jones", True, ""),
        # the first segment: a clause mark once it holds ~40 characters
        (
            "The quick brown fox jumps over the lazy dog, and then",
            True,
            "The quick brown fox jumps over the lazy dog,",
        ),
        ("The quick brown fox jumps over the lazy dog, and then", False, ""),
        ("Hi, there you go", True, ""),
        ("A first part of a long sentence — and more", True, ""),
        (
            "A first part of a fairly long sentence here — and more",
            True,
            "A first part of a fairly long sentence here —",
        ),
        ("Numbers like 1,234,567 stay whole in the first segment", True, ""),
        # a long first sentence without a clause mark waits for its end: never a bare space
        ("The committee met on a cold and windy morning to review the proposal for", True, ""),
        (
            "The committee met on a cold and windy morning to review the proposal for",
            False,
            "",
        ),
    ],
)
def test_release_point(pending: str, first: bool, released: str) -> None:
    n = release_point(pending, RULE, Occasion(first=first))
    assert pending[:n] == released


def test_release_point_idle_flush_and_cap() -> None:
    # idle: up to the last clause mark, else the last word boundary (a word being typed waits)
    assert release_point("some words her", RULE, Occasion(idle=True)) == len("some words")
    assert release_point("some, words her", RULE, Occasion(idle=True)) == len("some,")
    assert release_point("oneword", RULE, Occasion(idle=True)) == 0
    # the listener running dry: a clause mark, never a bare space
    assert release_point("some, words her", RULE, Occasion(low=True)) == len("some,")
    assert release_point("some words her", RULE, Occasion(low=True)) == 0
    # flush: everything
    assert release_point("some words her", RULE, Occasion(flush=True)) == 14
    # hard cap: cut as the frontend cuts a sentence that long (a comma before a space)
    text = "word " * 60
    n = release_point(text, RULE)
    assert 0 < n <= RULE.max_chars and text[n] == " "
    assert release_point("x" * 300, RULE) == RULE.max_chars
    commas = "word " * 10 + "and, " + "word " * 50
    assert commas[: release_point(commas, RULE)].endswith("and,")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text", ["." * 19_999 + "a", "word " * 4_000, "Dr. " * 5_000, "a. " * 6_666]
)
def test_a_long_append_is_released_in_linear_time(text: str) -> None:
    """A text feed releases one big append piece by piece, asking about what is left each
    time, on the event loop: the dots took 111 s, the words 0.7 s."""
    t0 = time.thread_time()  # this thread's CPU: what a busy box adds does not count
    spoken, first = 0, True
    while spoken < len(text):
        n = release_point(text[spoken:], RULE, Occasion(first=first))
        if n <= 0:
            break
        spoken, first = spoken + n, False
    assert time.thread_time() - t0 < 0.5
    assert spoken >= len(text) - RULE.max_chars


_PIECES = [
    "Hello",
    "there.",
    "Dr.",
    "Smith",
    "e.g.",
    "3.50",
    "etc.",
    "The",
    "J.",
    "R.",
    "Wait...",
    "what?",
    "No!",
    '"Hi."',
    "(yes.)",
    "St.",
    "pm.",
    "…",
    "。",
    "😀",
    "\n",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=200).map(" ".join),
    st.lists(st.integers(1, 400), min_size=1, max_size=30),
)
def test_sentence_cuts_do_not_depend_on_what_was_asked_before(text: str, steps: list[int]) -> None:
    """The cuts of a text are remembered for what is left after a release and for appends;
    each answer is the one a fresh scan gives."""
    spoken, first, end = 0, True, 0
    for step in steps:
        end = min(len(text), end + step)
        while spoken < end:
            pending = text[spoken:end]
            n = release_point(pending, RULE, Occasion(first=first))
            remembered = textstream._sentence_cut(pending)
            textstream._recent = ()
            assert remembered == textstream._sentence_cut(pending)
            if n <= 0:
                break
            spoken, first = spoken + n, False


@pytest.mark.parametrize(
    ("pending", "markdown", "drafted"),
    [
        ("The train", False, True),  # a word to say, a word ahead
        ("The", False, False),
        ("  The  ", False, False),
        ("word " * 100, False, False),  # longer than a segment may be
        ("Sure, here is **the plan", True, True),
        ("| Day | Rain", True, False),  # a table row is released whole
        ("```python\nprint", True, False),
        ("1. Pasta with\ntomatoes", True, False),  # a second line: not a paragraph's first
    ],
)
def test_what_an_eager_stream_drafts(pending: str, markdown: bool, drafted: bool) -> None:
    assert textstream.draftable(pending, RULE, markdown) is drafted


@pytest.mark.parametrize(
    ("pending", "markdown", "cut"),
    [
        ("Well, the train to Boston leaves", False, len("Well, the train to Boston")),
        ("Well", False, 0),
        ("See [the docs for", True, 0),  # inside a link
        ("See the **docs** for", True, len("See the **docs**")),
    ],
)
def test_an_eager_stream_idles_to_its_last_word_boundary(
    pending: str, markdown: bool, cut: int
) -> None:
    """Its words up to the last one may have been said: the idle rule releases them all (a
    clause mark before them would have the job say them twice)."""
    assert textstream.word_cut(pending, markdown) == cut
