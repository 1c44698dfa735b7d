"""Markdown read as a person reads a language model's reply (appliance.text.markdown)."""

from __future__ import annotations

import itertools
import re
import time

import pytest

from appliance.errors import ErrorCode, ServiceError
from appliance.text.frontend import FrontendLimits, prepare
from appliance.text.markdown import MAX_BRACKETS, MarkdownOptions, parse
from appliance.text.markdown_budget import BUDGET, PLACEHOLDER
from appliance.text.ssml import MAX_TOTAL_BREAK_MS
from tests.text.markdown_cases import CASES, HOSTILE, MARKUP

LIMITS = FrontendLimits(max_chars=20000, sentence_chars=300)


def said(source: str, **kw: object) -> str:
    clauses = prepare(source, "en_US", LIMITS, text_format="markdown", **kw)  # type: ignore[arg-type]
    return " ".join(c.text for c in clauses)


@pytest.mark.parametrize(("name", "source", "words"), CASES, ids=[c[0] for c in CASES])
def test_markdown_is_read_as_a_person_reads_it(name: str, source: str, words: str) -> None:
    assert said(source) == words
    clauses = prepare(source, "en_US", LIMITS, text_format="markdown")
    for c in clauses:
        assert not MARKUP.search(c.text), (name, c.text)
        a, b = c.span
        assert 0 <= a < b <= len(source), (name, c.span)
        for x, y in c.word_spans:
            assert a <= x <= y <= b
    # Spans follow the reading order and do not overlap.
    ends = [c.span for c in clauses]
    assert all(p[1] <= q[0] for p, q in itertools.pairwise(ends)), ends


def test_spans_index_the_source_as_sent() -> None:
    src = "## Weather\r\n\r\n**Sure!** The *rain* stops at noon."
    clauses = prepare(src, "en_US", LIMITS, text_format="markdown")
    assert [src[a:b] for a, b in (c.span for c in clauses)] == [
        "Weather",
        "Sure!",
        "The *rain* stops at noon.",
    ]
    words = [src[x:y] for c in clauses for x, y in c.word_spans]
    assert words[:4] == ["Weather", "Sure!", "The", "*rain*"] or words[:4] == [
        "Weather",
        "Sure!",
        "The",
        "rain",
    ]


def test_a_paragraph_is_read_as_plain_text() -> None:
    """No full stop is added to a paragraph: the same clauses, so the same audio."""
    for text in ("Hello world", "It is 3:30 pm, Dr. Smith. See you at 5!"):
        md = prepare(text, "en_US", LIMITS, text_format="markdown")
        plain = prepare(text, "en_US", LIMITS)
        assert [(c.text, c.span) for c in md] == [(c.text, c.span) for c in plain]


def test_headings_and_rules_pause() -> None:
    clauses = prepare("# Title\n\nBody.\n\n***\n\nMore.", "en_US", LIMITS, text_format="markdown")
    assert [(c.text, c.pause_after_ms) for c in clauses] == [
        ("Title.", 300),
        ("Body.", 500),
        ("More.", 0),
    ]
    opts = MarkdownOptions(heading_pause_ms=0)
    assert [b.pause_after_ms for b in parse("# T", opts)] == [0]


def test_code_blocks_skip_say_or_read() -> None:
    src = "Look:\n\n```sh\nls -l\n```\n\n    indented\n\nEnd."
    assert said(src) == "Look: End."
    say = MarkdownOptions(code_blocks="say", code_phrase="Code here.")
    assert said(src, markdown_options=say) == "Look: Code here. Code here. End."
    read = MarkdownOptions(code_blocks="read")
    assert said(src, markdown_options=read) == "Look: ls -l. indented. End."
    # The phrase's span is the whole block in the source.
    clauses = prepare(src, "en_US", LIMITS, text_format="markdown", markdown_options=say)
    a, b = clauses[1].span
    assert src[a:b].startswith("```sh") and "ls -l" in src[a:b]


def test_html_is_text_only_nothing_opened() -> None:
    src = (
        '<div onclick="x()">Hi &eacute;t&#233; <img src="http://evil/x.png"> '
        "<style>p{}</style><!-- note --></div>\n\n"
        "An <a href='file:///etc/passwd'>inline</a> tag &lt;b&gt; &#x41;."
    )
    assert said(src) == "Hi été. An inline tag <b> A."


def test_nothing_to_say_is_empty_text() -> None:
    for src in ("```\ncode only\n```", "---", "** **", "<br>"):
        with pytest.raises(ServiceError) as exc:
            prepare(src, "en_US", LIMITS, text_format="markdown")
        assert exc.value.code == ErrorCode.EMPTY_TEXT, src


def test_too_long_is_refused_before_parsing() -> None:
    with pytest.raises(ServiceError) as exc:
        prepare("*a* " * 6000, "en_US", LIMITS, text_format="markdown")
    assert exc.value.code == ErrorCode.TEXT_TOO_LONG


WORDS = {
    "10 000 one-letter lines": ["a"] * 10000,
    "6 666 paragraphs": ["a"] * 6666,
    "5 000 headings": ["a"] * 5000,
    "5 000 list items": ["a"] * 5000,
    "2 500 lines of nested items": ["a"] * 2500,
    "1 500 long item numbers": ["a"] * 1500,
    "2 500 table rows": ["a"] + ["b"] * 2497,
    "2 000 columns, 3 000 rows": ["a"] * 2000 + ["b"] * 3000,
    "300 paragraphs of 64 brackets": [],
    "26 paragraphs of 250 delimiters": ["a"] * 6500,
    "1 800 autolinks": ["http", "a"] * 1800,
    "6 666 tags": [],
    "4 000 entities": [],
    "10 000 escapes": [],
    "20 000 <": [],
    "20 000 &": [],
    "20 000 colons": [],
    "emphasis runs": ["a", "b"] * 3300,
    "code spans over lines": ["a", "b"] * 3000,
    "scripts and entities": [],
}
"""The words each hostile source says, in order (what lies past a bound included)."""
TEXT = {"20 000 <": "<", "300 paragraphs of 64 brackets": "["}
"""Characters of :data:`MARKUP` a hostile source has as text, not markup: a lone ``<``, an
unmatched bracket (markdown-it's text; the frontend says nothing for either)."""


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_markdown_is_bounded(name: str) -> None:
    src = HOSTILE[name]
    assert len(src) <= LIMITS.max_chars
    t0 = time.perf_counter()
    blocks = parse(src)
    elapsed = time.perf_counter() - t0
    # Generous: the bench measures; this box is shared (50 ms alone, 20 000 characters).
    assert elapsed < 1.0, (name, elapsed)
    for b in blocks:
        assert all(0 <= s <= e <= len(src) for s, e in zip(b.text.starts, b.text.ends, strict=True))


@pytest.mark.parametrize("name", list(WORDS))
def test_hostile_markdown_says_its_words_and_no_markup(name: str) -> None:
    text = " ".join(b.text.text for b in parse(HOSTILE[name])).replace(PLACEHOLDER, "")
    assert re.findall(r"[^\W_]+", text) == WORDS[name]
    assert set(MARKUP.findall(text)) <= set(TEXT.get(name, "")), name


def test_deep_nesting_says_the_outer_levels_only() -> None:
    src = "\n".join("  " * k + "- item" for k in range(40))
    items = said(src).split()
    assert set(items) == {"item."} and 5 <= len(items) < 40, items


def test_brackets_past_the_cap_are_plain() -> None:
    src = "[x](u) " * (MAX_BRACKETS + 10)
    text = " ".join(b.text.text for b in parse(src))
    assert "x" in text and "(u)" in text  # links past the cap keep their source


def _definitions(n: int) -> str:
    return "".join(f'[r{k}]: https://example.com/{k} "Title {k}"\n' for k in range(n))


@pytest.mark.parametrize(
    "source",
    [
        _definitions(MAX_BRACKETS + 6) + "\nSee [r1] and [r69].",
        "[x] " * (MAX_BRACKETS + 6) + "\n\n" + _definitions(3) + "\nSee [r1].",
        "  [a]: <https://example.com/a b> 'T'\n   [b]: /u (t)\n\nSee [a] and [b].",
    ],
    ids=["70 definitions", "after 70 brackets", "indented, titled"],
)
def test_link_reference_definitions_are_never_read(source: str) -> None:
    """Past 64 ``[`` in a paragraph, the 65th definition's bracket was no markup any more:
    "r64]: https://example.com/64 "Title 64"" was read aloud.  Past the parse budget too."""
    for options in (None, MarkdownOptions(spent=BUDGET)):
        text = " ".join(b.text.text for b in parse(source, options))
        assert "example" not in text and "Title" not in text and "]:" not in text, text
        assert "See" in text


def test_a_line_that_only_looks_like_a_definition_is_read() -> None:
    """No destination and title as CommonMark has them: text, read as markdown-it reads it."""
    for options in (None, MarkdownOptions(spent=BUDGET)):
        text = " ".join(b.text.text for b in parse("[Note]: this is important", options))
        assert "this is important" in text


def test_pauses_add_up_to_the_cap_of_ssml_breaks() -> None:
    """5 000 headings gave 145 s of silence, 2 000 rules 210 s (a 20 000-character source):
    a request's pauses now stop at the SSML cap, 60 s; the text is still read."""
    for source in ("# a\n" * 5000, "a\n\n---\n\n" * 2000, "# a\n\n---\n\n" * 1500):
        clauses = prepare(source, "en_US", LIMITS, text_format="markdown")
        assert sum(c.pause_after_ms for c in clauses) == MAX_TOTAL_BREAK_MS
        assert sum(b.pause_after_ms for b in parse(source)) == MAX_TOTAL_BREAK_MS
        assert len(clauses) >= 1500
    # Pauses a request's earlier text was given count: what is left, then none.
    opts = MarkdownOptions(paused_ms=MAX_TOTAL_BREAK_MS - 100)
    assert [b.pause_after_ms for b in parse("# a\n\n# b\n\n# c", opts)] == [100, 0, 0]


def test_a_decoded_entity_is_its_word_alone() -> None:
    """ "Tom &amp; Jerry": the word "and" spanned " &amp; ", the spaces around it."""
    src = "Tom &amp; Jerry &lt; 3 &#43; 4"
    clauses = prepare(src, "en_US", LIMITS, text_format="markdown")
    words = [
        (w, src[x:y])
        for c in clauses
        for w, (x, y) in zip(c.text.split(), c.word_spans, strict=True)
    ]
    assert ("and", "&amp;") in words
    assert all(not s[:1].isspace() and not s[-1:].isspace() for _, s in words), words
