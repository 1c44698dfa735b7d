"""Markdown a language model writes → the words a person reading it aloud says.

Shared by the frontend's tests, the daemon's (``phonemes``, text streams) and the bench."""

from __future__ import annotations

import re

CASES: list[tuple[str, str, str]] = [
    # (name, Markdown source, the words said: the clauses' text, joined by spaces)
    (
        "emphasis",
        "**Sure!** Here is *one* and __two__ and ~~three~~.",
        "Sure! Here is one and two and three.",
    ),
    ("inline code", "Run `make test` now.", "Run make test now."),
    ("heading", "## Weather\nIt is sunny.", "Weather. It is sunny."),
    (
        "lists",
        "Here are three options:\n\n1. **Pasta**\n2. Pizza\n   - with olives\n3. Salad",
        "Here are three options: Pasta. Pizza. with olives. Salad.",
    ),
    ("link", "See [the guide](https://example.com/guide) first.", "See the guide first."),
    ("image", "A cat: ![a small cat](cat.png) and ![](x.png).", "A cat: a small cat and."),
    ("quote", "> Be kind.\n> Always.", "Be kind. Always."),
    (
        "table",
        "| Day | Rain |\n|-----|------|\n| Monday | yes |\n| Tuesday | no |",
        "Day, Rain. Monday, yes. Tuesday, no.",
    ),
    ("code block", "Try this:\n\n```python\nprint('hi')\n```\n\nDone.", "Try this: Done."),
    ("rule", "Before.\n\n---\n\nAfter.", "Before. After."),
    (
        "html",
        "Hello <b>there</b> &amp; welcome<script>alert(1)</script>.",
        "Hello there and welcome.",
    ),
    ("escaped", "Not \\*bold\\* here.", "Not bold here."),
    (
        "hostile links",
        "[click](javascript:alert(1)) or [file](file:///etc/passwd).",
        "click or file.",
    ),
    ("autolink", "Visit <https://example.com> today.", "Visit example dot com today."),
    # symbols a reader skips are skipped as in plain text (the same frontend steps)
    ("symbols", "Done ✅ → next • item ─── end.", "Done → next • item end."),
    ("footnote", "Note[^1] here.\n\n[^1]: The source.", "Note here. The source."),
    (
        "one line",
        "**Sure!** Here are options: ## Weather | Day | Rain |",
        "Sure! Here are options: Weather Day Rain",
    ),
]

MARKUP = re.compile(r"[*_#|`~<>\[\]]")
"""Characters of markup: none of them is said."""

HOSTILE = {
    "10 000 nested lists": "- " * 9990 + "deep",
    "10 000 nested quotes": ">" * 10000 + " deep",
    "unclosed fence": "Intro.\n\n```\n" + "x = 1\n" * 3000,
    "one table row of 20 000 chars": "| a | b |\n|---|---|\n|" + " c |" * 4990,
    "20 000 unmatched brackets": "[" * 20000,
    "5 000 unclosed links": "[a](" * 4990,
    "10 000 unclosed images": "![" * 10000,
    "emphasis runs": "*a _b " * 3300,
    "code spans over lines": "`a\nb` " * 3000,
    "scripts and entities": "<script>alert(1)</script>&amp;&#0;&#x110000;" * 440,
    # Many short lines, blocks or markup characters: markdown-it-py's cost per line (~5 us),
    # per block (~10-40 us) or per character its inline parser stops at (~1-2 us) times
    # what 20 000 characters hold; read plainly past the parse budget
    # (appliance.text.markdown_budget).
    "10 000 one-letter lines": "a\n" * 9999 + "a",
    "6 666 paragraphs": "a\n\n" * 6666,
    "5 000 headings": "# a\n" * 5000,
    "5 000 list items": "- a\n" * 5000,
    "2 500 lines of nested items": "- - - a\n" * 2500,
    "1 500 long item numbers": "123456789. a\n" * 1500,
    "2 500 table rows": "| a |\n|---|\n" + "| b |\n" * 2497,
    "2 000 columns, 3 000 rows": "|a" * 2000 + "\n" + "|-" * 2000 + "\n" + "|b\n" * 3000,
    "300 paragraphs of 64 brackets": ("[" * 64 + "\n\n") * 300,
    "26 paragraphs of 250 delimiters": ("*a " * 250 + "\n\n") * 26,
    "1 800 autolinks": "<http://a> " * 1800,
    "6 666 tags": "<a>" * 6666,
    "4 000 entities": "&amp;" * 4000,
    "10 000 escapes": "\\*" * 10000,
    "20 000 <": "<" * 20000,
    "20 000 &": "&" * 20000,
    "20 000 colons": ":" * 19999 + "*",
}
"""Markdown built to be slow or to smuggle markup, each at most 20 000 characters (the
default ``limits.max_text_chars``): bounded in tests/text/test_markdown.py, timed by the
bench (bench/markdown.py)."""
