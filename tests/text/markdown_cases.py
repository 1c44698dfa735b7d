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
