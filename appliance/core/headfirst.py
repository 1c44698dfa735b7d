"""A long one-shot text is prepared head first: its first audio waits for the frontend of
its first sentences, not of the whole text (issue 28).

The frontend of a 2 kB reply costs ~6 ms as plain text and ~8 ms as Markdown, and a
one-shot request's first clause waited for all of it.  :func:`appliance.text.cuts.head.head_cut`
says where to cut a text (0: don't; the rule, its invariant and its bounds are stated
there): :func:`prepare_head` prepares the head, the service queues its clauses, then
:func:`prepare_tail` prepares the rest in the frontend executor, its spans moved to index
the whole text (appliance.core.service).

Markdown past its parse budget (:mod:`appliance.text.markdown_budget`) keeps the invariant:
the tail is parsed with the head's cost spent, so it is read plainly from the line where the
whole text is; and with the head's heading and rule pauses given, so that the request's
pauses stop at the cap (``MarkdownOptions.paused_ms``) where the whole text's do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from appliance.core.textstream import shift_clause
from appliance.errors import ErrorCode, ServiceError
from appliance.text import markdown
from appliance.text.cuts.head import head_cut
from appliance.text.frontend import Clause, FrontendLimits

Frontend = Callable[..., list[Clause]]
"""``appliance.text.frontend.prepare`` (or a test's stand-in): text, language, limits, and
its keyword options."""


def prepare_head(
    frontend: Frontend, text: str, language: str, limits: FrontendLimits, **options: object
) -> tuple[list[Clause], int]:
    """The head's clauses and where the tail starts (``len(text)``: no tail).  A head with
    nothing to say (Markdown that opens with code) is no head: the whole text is prepared."""
    fmt = str(options.get("text_format", "text"))
    cut = head_cut(text, fmt, language, limits.max_chars)
    if cut:
        try:
            return frontend(text[:cut], language, limits, **options), cut
        except ServiceError as exc:
            if exc.code != ErrorCode.EMPTY_TEXT:
                raise
    return frontend(text, language, limits, **options), len(text)


def prepare_tail(
    frontend: Frontend,
    text: str,
    cut: int,
    language: str,
    limits: FrontendLimits,
    **options: object,
) -> list[Clause]:
    """The clauses of ``text[cut:]``, their spans indexing ``text`` (nothing to say: none).
    Prepared as a later segment of a text stream is: the first-clause cut
    (``first_clause_chars``) is the head's.  Markdown's parse budget is the whole text's:
    the head's cost is spent (``MarkdownOptions.spent``), so the rest of the text is read
    plainly from the line where the whole text's would be."""
    later = dataclasses.replace(limits, first_clause_chars=0)
    if options.get("text_format") == "markdown":
        options = {**options, "markdown_options": _spent(text[:cut], options)}
    try:
        clauses = frontend(text[cut:], language, later, **options)
    except ServiceError as exc:
        if exc.code == ErrorCode.EMPTY_TEXT:
            return []
        raise
    return [shift_clause(c, cut) for c in clauses]


def _spent(head: str, options: dict[str, object]) -> markdown.MarkdownOptions:
    """The request's Markdown options with ``head``'s parse cost spent and its pauses given
    (the request's pauses are capped as a whole: the head is parsed again, ~1 ms)."""
    given = options.get("markdown_options")
    md = given if isinstance(given, markdown.MarkdownOptions) else markdown.MarkdownOptions()
    paused = sum(block.pause_after_ms for block in markdown.parse(head, md))
    return dataclasses.replace(
        md, spent=md.spent + markdown.cost(head), paused_ms=md.paused_ms + paused
    )
