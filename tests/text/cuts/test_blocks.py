"""Markdown that streams in: where a segment may end (table-driven), and the same words as
the whole text whatever the token sizes (appliance.text.cuts.blocks)."""

from __future__ import annotations

import random
import time

import pytest

from appliance.errors import ServiceError
from appliance.text.cuts.blocks import markdown_release_point
from appliance.text.cuts.stream import Occasion, SegmentRule
from appliance.text.frontend import FrontendLimits, prepare
from tests.text.markdown_cases import CASES

RULE = SegmentRule(first_chars=40, max_chars=400, idle_ms=300)
LIMITS = FrontendLimits(max_chars=20000, sentence_chars=300)


@pytest.mark.parametrize(
    ("pending", "released"),
    [
        # a sentence inside a paragraph, its emphasis closed
        ("**Sure!** Here", "**Sure!**"),
        ("**Sure!*", ""),  # the closing run may not be whole yet
        ("**Sure!**", ""),  # nor this one ("***")
        ("Plain. Text", "Plain."),
        # blocks end at the line that starts the next one ...
        ("## Weather\n", "## Weather\n"),
        ("## Weath", ""),
        ("- one\n- tw", "- one\n"),
        ("- one\n  - nested\n", "- one\n  "),  # the next item keeps its marker first
        ("- one\n-", "- one\n"),
        ("- one\n", ""),  # a continuation line may follow
        ("1. one\n2", ""),  # "2" may be "2. two" or "2024 was"
        ("1. one\n2. two", "1. one\n"),
        ("Intro:\n\nMore", "Intro:\n\n"),
        ("> quoted\n> more", "> quoted\n"),
        # ... and a list item is released whole, whatever its sentences
        ("- First. Second", ""),
        ("- First. Second\n- Third", "- First. Second\n"),
        # a link, a tag, a code span: never cut inside
        ("[Go here.](http://x) Next", ""),
        ("[Go here.", ""),
        ("Use `a. b", ""),
        ("<b>Hi.</b> there", ""),  # a tag after the full stop: the next block says
        # fences and tables are held until they end
        ("```\ncode. more\n", ""),
        ("```\ncode. more\n```\nAfter", "```\ncode. more\n```\n"),
        ("Look:\n```\ncode", "Look:\n"),
        ("| a | b |\n|---|---|\n| c | d |\n", ""),
        ("| a | b |\n|---|---|\n| c | d |\n\n", "| a | b |\n|---|---|\n| c | d |\n"),
        ("| a | b |\n|---|---|\n| c | d |\nText", "| a | b |\n|---|---|\n| c | d |\n"),
    ],
)
def test_markdown_release_point(pending: str, released: str) -> None:
    n = markdown_release_point(pending, RULE)
    assert pending[:n] == released


@pytest.mark.timeout(60)
def test_a_held_fence_costs_little_per_append() -> None:
    """A fence or table being written is asked about after every append: one search each."""
    for held in ("```python\n" + "x = 1\n" * 3000, "| a |\n|---|\n" + "| b |\n" * 3000):
        t0 = time.thread_time()  # CPU, not wall: a busy box adds nothing
        for _ in range(200):
            assert markdown_release_point(held, RULE) == 0
        assert (time.thread_time() - t0) / 200 < 0.005


def test_flush_releases_an_open_fence_or_table() -> None:
    for pending in ("```\nnever closed", "| a |\n|---|\n| b |"):
        assert markdown_release_point(pending, RULE) == 0
        assert markdown_release_point(pending, RULE, Occasion(flush=True)) == len(pending)


def test_a_long_list_item_is_cut_as_the_plain_rule_cuts() -> None:
    item = "- " + "word, " * 100
    n = markdown_release_point(item, RULE)
    assert 0 < n <= RULE.max_chars


def _said(source: str) -> list[str]:
    try:
        return [c.text for c in prepare(source, "en_US", LIMITS, text_format="markdown")]
    except ServiceError:
        return []  # a segment with nothing to say (a closing quote): the feed skips it


def _stream_segments(source: str, seed: int) -> list[str]:
    """What a text feed releases when ``source`` arrives in 1–5-character tokens."""
    rnd = random.Random(seed)
    text, spoken, first, segments = "", 0, True, []
    pos = 0
    while True:
        flush = pos >= len(source)
        while spoken < len(text):
            pending = text[spoken:]
            n = markdown_release_point(pending, RULE, Occasion(first=first, flush=flush))
            if n <= 0:
                break
            if pending[:n].strip():
                segments.append(pending[:n])
                first = False
            spoken += n
        if flush:
            return segments
        step = rnd.randint(1, 5)
        text += source[pos : pos + step]
        pos += step


@pytest.mark.parametrize(("name", "source", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_stream_in_small_tokens_says_the_same_words(name: str, source: str, words: str) -> None:
    for seed in range(25):
        segments = _stream_segments(source, seed)
        assert "".join("".join(segments).split()) == "".join(source.split())
        got = " ".join(w for seg in segments for w in _said(seg))
        assert got == words, (name, seed, segments)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "source",
    [
        "```\n" + "x = 1\n" * 3000,  # a fence that never closes
        "| a |\n|---|\n" + "| b |\n" * 3000,  # a table that never ends
        "- " * 9000 + "deep",
        "Sure. " * 3000,
    ],
)
def test_hostile_streams_are_decided_in_bounded_time(source: str) -> None:
    """Each append asks about the pending text once; a big one is decided in linear time."""
    t0 = time.thread_time()  # this thread's CPU: what a busy box adds does not count
    spoken, first = 0, True
    while spoken < len(source):
        n = markdown_release_point(source[spoken:], RULE, Occasion(first=first))
        if n <= 0:
            break
        spoken, first = spoken + n, False
    assert time.thread_time() - t0 < 1.0
