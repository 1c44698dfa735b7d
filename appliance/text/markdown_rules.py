"""markdown-it-py's rules, tried only where they can match: the same tokens, sooner.

markdown-it tries every block rule on every line; inside a paragraph, every rule that can
end one on every further line — twice, as the setext-heading rule scans the paragraph for
an underline before the paragraph rule scans it again — and it runs its inline parser on
every text.  Most of those tries fail on the first character they read.  :func:`install`
replaces rules through the rulers' public ``at``:

- the rules keyed by a line's first character (fence, blockquote, list, reference,
  html_block, heading; table by its next line, code by its indent) get a guard that makes
  that check and calls the rule, unchanged, only where it passes;
- hr reads the whole line a character at a time, at every nesting level (10 000 nested
  list items: one 20 000-character line read ten times): its guard is one ``str.strip``;
- lheading runs only where a line of the paragraph can underline it (or end it first);
- paragraph is markdown-it-py's rule line for line (rules_block/paragraph.py), except that
  a further line's terminators are tried only where its first character (or the next
  line's, for a table) can start one;
- the core ``inline`` rule makes a text with no :data:`INLINE_STARTS` character the one
  text token markdown-it's inline parser would make of it, without running the parser.

Nothing of markdown-it's is patched: its rules run unchanged, fewer times.  One difference
of state: lheading, where it fails, leaves ``state.parentType`` at ``"paragraph"``, and
skipped it does not — harmless, as its one reader (the list rule, in a terminator scan)
runs only after its caller has set it.  tests/text/test_markdown_rules.py parses every
Markdown source of the tests and the bench, and ~1 700 generated documents, with the plain
and the guarded parser and compares tokens and blocks.

The guards hold for markdown-it-py 4.x's CommonMark rules with ``table`` and
``strikethrough`` and without ``linkify`` (whose rule starts at any letter); a rule enabled
later needs a guard of its own or none.  Pure functions of the state markdown-it passes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from markdown_it import MarkdownIt
from markdown_it.common.utils import mdTrim
from markdown_it.rules_block import (
    StateBlock,
    blockquote,
    code,
    fence,
    heading,
    hr,
    html_block,
    lheading,
    list_block,
    reference,
    table,
)
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

BlockRule = Callable[[StateBlock, int, int, bool], bool]

INLINE_STARTS = "\n\\`~*_[<&"
"""Characters at which an inline rule (newline, escape, backticks, strikethrough, emphasis,
link, image — ``![`` —, autolink, html_inline, entity) can make a token: a text without
any is one text token."""
_INLINE_START = re.compile("[" + re.escape(INLINE_STARTS) + "]")

_ENDS_PARAGRAPH = ["paragraph", "reference", "blockquote", "list"]
# Each rule's first character (at the line's first non-space), and the chains it ends.
_FIRST: dict[str, tuple[BlockRule, str, list[str]]] = {
    "fence": (fence, "~`", _ENDS_PARAGRAPH),
    "blockquote": (blockquote, ">", _ENDS_PARAGRAPH),
    "list": (list_block, "*-+0123456789", _ENDS_PARAGRAPH[:3]),
    "reference": (reference, "[", []),
    "html_block": (html_block, "<", _ENDS_PARAGRAPH[:3]),
    "heading": (heading, "#", _ENDS_PARAGRAPH[:3]),
}
_TABLE_DELIMITER = "|-:"
"""A table's second line (its delimiter row) starts with one of these, and holds only
:data:`_DELIMITER_ROW`."""
_DELIMITER_ROW = "|-: \t"
_MAY_END_PARAGRAPH = frozenset("-=" + _TABLE_DELIMITER + "~`>*_+#<0123456789")
"""A line starting with none of these neither underlines a setext heading nor can end the
paragraph before it (or the line before it: a table's delimiter row)."""


def install(md: MarkdownIt) -> MarkdownIt:
    """``md`` with its block rules guarded and its inline parse skipped where plain."""
    ruler = md.block.ruler
    for name, (rule, chars, alt) in _FIRST.items():
        ruler.at(name, _starts_with(rule, chars), {"alt": alt})
    ruler.at("table", _table, {"alt": ["paragraph", "reference"]})
    ruler.at("hr", _hr, {"alt": _ENDS_PARAGRAPH})
    ruler.at("code", _code)
    ruler.at("lheading", _lheading)
    ruler.at("paragraph", _paragraph)
    md.core.ruler.at("inline", _inline)
    return md


def _starts_with(rule: BlockRule, chars: str) -> BlockRule:
    @functools.wraps(rule)
    def guarded(state: StateBlock, start: int, end: int, silent: bool) -> bool:
        pos = state.bMarks[start] + state.tShift[start]
        if pos < len(state.src) and state.src[pos] not in chars:
            return False  # the rule reads this character first and returns False
        return rule(state, start, end, silent)

    return guarded


@functools.wraps(table)
def _table(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """The table rule, where the next line can be a delimiter row: the rule's own first
    test (every line that a line starting with ``-`` follows was a table's first line)."""
    nxt = start + 1
    if nxt >= end:
        return False
    row = state.src[state.bMarks[nxt] + state.tShift[nxt] : state.eMarks[nxt]]
    if len(row) < 2 or row[0] not in _TABLE_DELIMITER or row.strip(_DELIMITER_ROW):
        return False
    if row[0] == "-" and row[1] in " \t":
        return False  # a list item, not a delimiter row
    return table(state, start, end, silent)


@functools.wraps(hr)
def _hr(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """The rule reads the whole line for a rule's marker and spaces, a character at a time,
    at each nesting level (10 000 nested list items were one line read ten times): the same
    test, in one ``strip``."""
    pos = state.bMarks[start] + state.tShift[start]
    if pos >= len(state.src):
        return hr(state, start, end, silent)
    marker = state.src[pos]
    if marker not in "*-_" or state.src[pos : state.eMarks[start]].strip(marker + " \t"):
        return False
    return hr(state, start, end, silent)


@functools.wraps(code)
def _code(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    if state.sCount[start] - state.blkIndent < 4:
        return False  # not indented as code: the rule's first check
    return code(state, start, end, silent)


@functools.wraps(lheading)
def _lheading(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """The setext-heading rule, where a line of the paragraph can underline it: markdown-it
    scans the paragraph for one (trying every terminator on each line), then scans it again
    as a paragraph.  This scan hands over at the first line that could underline or end the
    paragraph, so it reads at most one line past where the rule stops."""
    src, begins, shifts, ends = state.src, state.bMarks, state.tShift, state.eMarks
    for line in range(start + 1, end):
        pos = begins[line] + shifts[line]
        if pos >= ends[line]:
            return False  # an empty line ends the paragraph: no underline
        if src[pos] in _MAY_END_PARAGRAPH:
            return lheading(state, start, end, silent)
    return False


def _may_end(state: StateBlock, line: int, end: int) -> bool:
    """Whether a rule of the ``paragraph`` chain can match at ``line`` (a non-empty line):
    its first character, or the next line's for a table's delimiter row, says."""
    if state.src[state.bMarks[line] + state.tShift[line]] in _MAY_END_PARAGRAPH:
        return True
    nxt = line + 1
    pos = state.bMarks[nxt] + state.tShift[nxt] if nxt < end else 0
    return nxt < end and pos < state.eMarks[nxt] and state.src[pos] in _TABLE_DELIMITER


def _paragraph(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """markdown-it-py's paragraph rule (rules_block/paragraph.py, 4.x) line for line, but
    a line's terminators are tried only where :func:`_may_end` says one can match: on a
    paragraph of 3 000 lines, 21 000 calls fewer."""
    next_line = start + 1
    terminators = state.md.block.ruler.getRules("paragraph")
    end = state.lineMax
    old_parent = state.parentType
    state.parentType = "paragraph"
    while next_line < end:
        if state.isEmpty(next_line):
            break
        # Indented as code, or a blockquote's lazy line: a continuation, whatever it holds.
        if state.sCount[next_line] - state.blkIndent > 3 or state.sCount[next_line] < 0:
            next_line += 1
            continue
        if _may_end(state, next_line, end) and any(
            rule(state, next_line, end, True) for rule in terminators
        ):
            break
        next_line += 1
    content = mdTrim(state.getLines(start, next_line, state.blkIndent, False))
    state.line = next_line
    token = state.push("paragraph_open", "p", 1)
    token.map = [start, state.line]
    token = state.push("inline", "", 0)
    token.content = content
    token.map = [start, state.line]
    token.children = []
    state.push("paragraph_close", "p", -1)
    state.parentType = old_parent
    return True


def _inline(state: StateCore) -> None:
    """The core ``inline`` rule, but a text with no :data:`INLINE_STARTS` character becomes
    the text token markdown-it's inline parse would make, without running it."""
    md = state.md
    for token in state.tokens:
        if token.type != "inline":
            continue
        if token.children is None:
            token.children = []
        if _INLINE_START.search(token.content):
            md.inline.parse(token.content, md, state.env, token.children)
        elif token.content:
            token.children.append(Token("text", "", 0, content=token.content))
