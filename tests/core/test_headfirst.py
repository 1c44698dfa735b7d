"""A long one-shot text prepared head first (appliance.core.headfirst): the clauses of the
head then the tail are exactly the whole text's, for plain text and Markdown of every kind,
wherever the head may end."""

from __future__ import annotations

import random

import pytest

from appliance.core.headfirst import prepare_head, prepare_tail
from appliance.text.cuts import head
from appliance.text.cuts.head import HEAD_MIN_CHARS, head_cut
from appliance.text.frontend import Clause, FrontendLimits, prepare
from appliance.text.markdown import MarkdownOptions
from appliance.text.ssml import MAX_TOTAL_BREAK_MS
from bench.markdown import REPLY, _reply_2k
from tests.text.markdown_cases import CASES

LIMITS = FrontendLimits(max_chars=20000, sentence_chars=300, first_clause_chars=60)

SENTENCES = [
    "Dr. Smith arrived at 3:30 pm.",
    "It costs $3.50, or 3.5 euros.",
    "The U.S. team won, e.g. the relay.",
    "See https://example.com/a?b=1 for details.",
    "Prices rose 4.5% in 2023.",
    'He said "Hi." Then he left.',
    "Wait... what?",
    "Call 555-123-4567 now!",
    "St. Paul is on Main St. near the river.",
    "J. R. R. Tolkien wrote it in 1937.",
    "Version 2.0.1 shipped on 2024-05-01.",
    "Mix 1/2 cup with 2 tbsp. of oil.",
    "The meeting is on Jan. 5th at 10 a.m. sharp.",
    "Is it really 1,000,000?",
    "No. 5 is next.",
    "Prof. Lee, Mr. Jones and Mrs. Brown met.",
    "It was 1999. People danced.",
    "Temperatures hit 30°C (86°F) today.",
    "Use the config.yaml file, etc.",
    "Why not?",
    "A very long sentence that goes on and on, with clauses; and more clauses: and a dash"
    " - and yet more words to pass the sentence limit of the frontend, which cuts long"
    " sentences at their last clause mark within the limit, or at a comma, or a space, so"
    " that no sentence is ever longer than the encoder takes in one piece of work here.",
]

BLOCKS = [
    "## A heading",
    "# Title: *Big* news",
    "Some **bold** text and `code` here. " + SENTENCES[0],
    SENTENCES[1] + " " + SENTENCES[2],
    "1. First item\n2. Second item\n   - nested one\n3. Third",
    "- one\n- two\n\n- three, loose",
    "| Day | Rain |\n|-----|------|\n| Mon | 20% |\n| Tue | no |",
    "> A quote that\n> spans lines.",
    "```python\nprint('hi')\n```",
    "    indented code",
    "---",
    "***",
    "A paragraph\nover two lines.",
    "See [the guide](https://example.com/guide) and ![a cat](cat.png).",
    "Setext heading\n==============",
    "Another setext\n---",
    "<div>html</div>",
    "Text with a stray * star and snake_case_name.",
    "2. starts at two\n3. and three",
    "**Sure!** Here you go.",
    "1) paren list",
    "Final words.",
]


def _plain(rng: random.Random) -> str:
    text = ""
    while len(text) < rng.randint(HEAD_MIN_CHARS, 3000):
        text += rng.choice(SENTENCES) + rng.choice([" ", " ", "  ", "\n", "\n\n"])
    return text


def _markdown(rng: random.Random) -> str:
    text = ""
    while len(text) < rng.randint(HEAD_MIN_CHARS, 3000):
        text += rng.choice(BLOCKS) + rng.choice(["\n\n", "\n\n", "\n", "\n\n\n"])
    return text


def _in_two(text: str, fmt: str) -> tuple[list[Clause], int]:
    head, cut = prepare_head(prepare, text, "en_US", LIMITS, text_format=fmt)
    if cut >= len(text):
        return head, cut
    return head + prepare_tail(prepare, text, cut, "en_US", LIMITS, text_format=fmt), cut


def _same_as_whole(text: str, fmt: str) -> int:
    clauses, cut = _in_two(text, fmt)
    whole = prepare(text, "en_US", LIMITS, text_format=fmt)
    assert clauses == whole, (fmt, cut, text)
    return cut


@pytest.mark.parametrize("head_chars", [1, 80, 200, 700])
def test_head_then_tail_is_the_whole_text(head_chars: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head, "HEAD_CHARS", head_chars)
    rng = random.Random(head_chars)
    cut = {"text": 0, "markdown": 0}
    for _ in range(60):
        for fmt, make in (("text", _plain), ("markdown", _markdown)):
            text = make(rng)
            cut[fmt] += _same_as_whole(text, fmt) < len(text)
    for fmt in ("text", "markdown"):
        for source in (REPLY * 2, _reply_2k(), *(c[1] * 12 for c in CASES)):
            _same_as_whole(source, fmt)
    assert cut["text"] >= 30 and cut["markdown"] >= 5, cut  # most texts were cut


def test_what_is_not_cut() -> None:
    long = "Hello there. " * 60
    assert head_cut(long, "text", "en_US", 20000) > 0
    assert head_cut(long[: HEAD_MIN_CHARS - 1], "text", "en_US", 20000) == 0
    assert head_cut(long, "text", "en_US", len(long) - 1) == 0  # refused whole
    assert head_cut(long, "ssml", "en_US", 20000) == 0
    assert head_cut(long + "Привет.", "text", "en_US", 20000) == 0  # the script check
    assert head_cut(long + "Привет.", "text", "ru_RU", 20000) > 0
    assert head_cut(long + "\ud800", "text", "en_US", 20000) == 0
    md = "Intro paragraph here.\n\n" * 30
    assert head_cut(md, "markdown", "en_US", 20000) > 0
    assert head_cut(md + "[a]: https://x", "markdown", "en_US", 20000) == 0
    assert head_cut("<pre>\n" + md, "markdown", "en_US", 20000) == 0
    # Not before a rule or code: the tail would lose the pause the head's last clause gets.
    ruled = "Words here and there.\n\n---\n\n```\ncode\n```\n\n" * 20
    cut = head_cut(ruled, "markdown", "en_US", 20000)
    assert cut > 0 and ruled[cut:].startswith("Words")


def test_an_empty_head_means_the_whole_text() -> None:
    text = "```\n" + "code\n" * 60 + "```\n\n" + "Words to say. " * 40
    clauses, cut = _in_two(text, "markdown")
    assert cut == len(text) or clauses == prepare(text, "en_US", LIMITS, text_format="markdown")


def test_head_then_tail_past_the_markdown_budget() -> None:
    """A long Markdown text read past its parse budget (appliance.text.markdown_budget):
    the tail is parsed with the head's cost spent, and reads as the whole text does."""
    rng = random.Random(28)
    cut = 0
    for _ in range(12):
        text = ""
        while len(text) < 19000:
            block = rng.choice([*BLOCKS, REPLY, "- an item\n" * 40, "| a | b |\n" * 30])
            text += block + rng.choice(["\n\n", "\n\n", "\n", "\n\n\n"])
        cut += _same_as_whole(text[:19500], "markdown") < 19500
    assert cut >= 6, cut


def test_head_then_tail_pauses_stop_at_the_cap() -> None:
    """A request's Markdown pauses add up to at most the SSML cap (60 s): the tail is read
    with the head's pauses given, so they stop where the whole text's do."""
    opts = MarkdownOptions(heading_pause_ms=5000, rule_pause_ms=5000)
    text = "".join(f"# Part {k}\n\nSome words to say here.\n\n---\n\n" for k in range(30))
    head, cut = prepare_head(
        prepare, text, "en_US", LIMITS, text_format="markdown", markdown_options=opts
    )
    assert 0 < cut < len(text)
    tail = prepare_tail(
        prepare, text, cut, "en_US", LIMITS, text_format="markdown", markdown_options=opts
    )
    whole = prepare(text, "en_US", LIMITS, text_format="markdown", markdown_options=opts)
    assert head + tail == whole
    assert sum(c.pause_after_ms for c in whole) == MAX_TOTAL_BREAK_MS
    assert sum(c.pause_after_ms for c in head) > 0
