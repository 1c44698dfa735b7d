"""Markdown's parse budget and the plain reading past it (appliance.text.markdown_budget):
prices add up line by line, the cut is where the budget runs out, and what lies past it says
the same words as Markdown would, without its markup."""

from __future__ import annotations

import re

import pytest

from appliance.text import markdown_budget
from appliance.text.markdown import MarkdownOptions, cost, parse
from appliance.text.markdown_budget import BUDGET, PLACEHOLDER, budget_cut, read_plain
from bench.markdown import REPLY
from tests.text.markdown_cases import CASES, MARKUP
from tests.text.test_markdown_rules import _documents

_WORD = re.compile(r"[^\W_]+")


def _words(source: str, options: MarkdownOptions | None = None) -> list[str]:
    return _WORD.findall(" ".join(b.text.text for b in parse(source, options)))


def _said(text: str, **kw: str) -> list[str]:
    """The plain reading of ``text``, its blocks (placeholders of dropped markup removed)."""
    read = read_plain(text, 0, kw.get("fence", ""), kw.get("code", "skip"), "Code here.")
    for mt in read:
        assert len(mt.text) == len(mt.starts) == len(mt.ends)
        assert all(0 <= a <= b <= len(text) for a, b in zip(mt.starts, mt.ends, strict=True))
    starts = [s for mt in read for s in mt.starts]
    assert starts == sorted(starts)  # read in the source's order
    return [mt.text.replace(PLACEHOLDER, "") for mt in read]


def test_prices_add_up_line_by_line() -> None:
    """A text cut at a line start costs what its two parts cost (so a text read in two
    parts, head first, cuts its budget where the whole text does)."""
    for doc in _documents(300, seed=30):
        whole = cost(doc)
        for cut in (m.end() for m in re.finditer("\n", doc)):
            assert cost(doc[:cut]) + cost(doc[cut:]) == whole, (doc, cut)


def test_the_cut_is_where_the_budget_runs_out() -> None:
    text = (REPLY + "\n\n") * 20
    for spent in (0, 1000, BUDGET - 500, BUDGET + 1):
        cut = budget_cut(text, spent)
        assert cut < len(text) and (cut == 0 or text[cut - 1] == "\n")
        line_end = text.find("\n", cut) + 1 or len(text)
        assert cut == 0 or spent + cost(text[:cut]) <= BUDGET
        assert BUDGET < spent + cost(text[:line_end])
    short = "A short reply.\n\n- one\n- two\n"
    assert budget_cut(short) == len(short)
    assert budget_cut(short, BUDGET) == 0


@pytest.mark.parametrize(
    ("source", "said"),
    [
        # An item, a heading, a row: a sentence; a paragraph's other lines, a quote's: as written.
        ("- item\n* two\n+ three\n1. four\n10) five\n", ["item.\ntwo.\nthree.\nfour.\nfive.\n"]),
        ("> quoted\n> > deeper\n## Heading ##\n", ["quoted\ndeeper\nHeading .\n"]),
        ("| a | b |\n|---|---|\n| c | d |\n", ["  a   b.  \n --- --- \n  c   d.  \n"]),
        # A paragraph's end is a sentence's (after a word, or after markup).
        (
            "A paragraph\nover two lines\n\nAnother\n \n\n*Third*\n\n- item\n",
            ["A paragraph\nover two lines.\n\nAnother.\n \n\nThird.\n\nitem.\n"],
        ),
        ("See [the guide](http://x.org/a(b)) and ![a cat](c.png).", ["See the guide and a cat."]),
        ("- [a link](u)\n- <http://a.org>\n# Head *x*\n", ["a link.\nhttp://a.org.\nHead x.\n"]),
        ("**Sure!** Here is *one*", ["Sure! Here is one"]),
        ("2 * 3 and snake_case and C# and _edge_", ["2 * 3 and snake_case and C# and edge"]),
        ("<b>bold</b> &amp; <http://a.org>\n", ["bold & http://a.org\n"]),
        ("a<script>x\ny</script>b <!-- note -->\n", ["ab \n"]),
        ("Note[^1] here.\n", ["Note here.\n"]),
        ('- He said "hi"\n', ['He said "hi."\n']),
        # A fence is a block of its own, its code skipped (or said, or read: below).
        ("Intro\n```sh\nls -l\n```\nAfter\n", ["Intro\n", "\nAfter\n"]),
        ("Intro\n~~~\nnever closed\n", ["Intro\n"]),
    ],
)
def test_the_plain_reading(source: str, said: list[str]) -> None:
    assert _said(source) == said


def test_code_past_the_budget_is_skipped_said_or_read() -> None:
    src = "Intro\n```sh\nls -l\n```\nAfter\n"
    assert _said(src, code="say") == ["Intro\n", " Code here. ", "\nAfter\n"]
    assert _said(src, code="read") == ["Intro\n", "\nls -l. ", "\nAfter\n"]
    # A fence the Markdown before left open: its code first, to its closing line.
    assert _said("ls -l\n```\nAfter\n", fence="```") == ["\nAfter\n"]
    assert _said("ls -l\n```\nAfter\n", fence="```", code="read") == ["ls -l\n. ", "\nAfter\n"]


def test_a_fence_open_at_the_cut_goes_on_past_it() -> None:
    """Wherever the budget runs out — before, in or after a fence — its code is skipped (or
    read once) and what follows it is read."""
    src = "Intro.\n\n```\n" + "code line\n" * 40 + "```\n\nAfter the code.\n"
    for spent in range(BUDGET - cost(src), BUDGET + 1, 7):
        assert _words(src, MarkdownOptions(spent=spent)) == ["Intro", "After", "the", "code"]
        read = _words(src, MarkdownOptions(code_blocks="read", spent=spent))
        assert read.count("code") == 41 and read[-3:] == ["After", "the", "code"], spent


def test_past_the_budget_the_same_words_are_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """What lies past the budget says the words Markdown would, in order, and no markup
    (but indented code, which it reads: a line's indent is not known to be code there)."""
    texts = [(REPLY + "\n\n") * 15, "\n\n".join(c[1] for c in CASES) * 12]
    for text in (t[:20000] for t in texts):
        assert cost(text) > BUDGET
        plain = _words(text)
        said = " ".join(b.text.text for b in parse(text)).replace(PLACEHOLDER, "")
        assert not MARKUP.findall(said), set(MARKUP.findall(said))
        monkeypatch.setattr(markdown_budget, "BUDGET", 10**9)
        assert plain == _words(text)
        monkeypatch.undo()
