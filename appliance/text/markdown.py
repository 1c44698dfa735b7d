"""Markdown (what a language model writes) → the text a person reading it aloud would say.

:func:`parse` turns a Markdown source into :class:`Block` s: each block's spoken text is a
:class:`~appliance.text.textmap.MappedText` whose every character points back into the
source *as sent*, so chunk ``text_span`` s index the Markdown the client shows.  The
frontend (:func:`appliance.text.frontend.prepare_markdown`) speaks each block as plain text.

How it reads (docs/markdown.md): emphasis, strong, strikethrough and inline-code markers
are dropped and their text said; a heading, a paragraph, each list item (at any depth, its
number not read) and each table row (cells read in order, a comma between them) is its own
sentence — a heading, a list item and a row get a full stop, zero width, where they have
none (a paragraph is read as written: plain text's very audio) — and a heading is followed
by ``heading_pause_ms``, a horizontal rule by ``rule_pause_ms``; a link is its text, an
image its alt text (nothing without one), an autolink or a bare URL the address as the
normaliser reads it; raw HTML loses its tags (``<script>``/``<style>`` their content too)
and keeps its text, entities decoded; footnote markers (``[^1]``) are dropped (no footnote
plugin: a footnote's text is read where it is written).  Fenced and indented code is
skipped, replaced by ``code_phrase`` or read, as ``code_blocks`` says.  Delimiters left
unmatched (``*``, ``_`` at a word's edge, ``~``, a backtick) are dropped too: a stream's
unfinished emphasis and a model's stray asterisk are markup, not words.  Nothing is
fetched or opened: URLs are text.

Parsing: markdown-it-py (CommonMark, with the table and strikethrough rules; some of its
rules behind guards that try them only where they can match — the same tokens, see
:mod:`appliance.text.markdown_rules`), which gives block tokens line ranges only; inline
text is found by walking the source from a cursor that only moves forward, so the cost is
linear in the source.  Bounds: the source is at most ``limits.max_text_chars`` (checked
before parsing); markdown-it's ``maxNesting`` (:data:`MAX_NESTING`) stops deeper block
nesting — what lies deeper is not read; brackets and delimiters past :data:`MAX_BRACKETS`
and :data:`MAX_DELIMITERS` in one paragraph are not markup (where markdown-it's cost grows
fastest); and markdown-it is given the source up to a parse budget, the rest of it read
plainly (:mod:`appliance.text.markdown_budget`: 16 000 units, ~16 ms of parsing; a 2 kB
reply spends ~3 150) — every source of 20 000 characters parses in ~25 ms or less on the
bench's 2-core box (docs/markdown.md has the figures).  Pure functions; the daemon calls
them in its frontend executor.
"""

from __future__ import annotations

import html
import itertools
import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

from appliance.text import markdown_budget, markdown_rules, ssml
from appliance.text.textmap import Builder, MappedText

CODE_BLOCKS = ("skip", "say", "read")
MAX_NESTING = 20
"""Block and inline nesting markdown-it follows; deeper content is not read."""
MAX_BRACKETS = 64
"""'[' characters of one paragraph (text between blank lines) after this many are not markup:
markdown-it's link scan is quadratic in them within a paragraph (20 000 unmatched brackets
took 200 ms, 256 unclosed links before 20 000 characters 90 ms).  They are dropped, as the
plain reading says nothing for a bracket; a link past them is read with its address.  The
bracket that opens a link reference definition's label (``[label]:`` at a line's start) is
neither counted nor dropped: a definition is never read aloud, however many brackets come
before it (its label is closed on its line, so markdown-it's scan from it is short)."""
MAX_DELIMITERS = 256
"""Emphasis, strike and code delimiters (``*``, ``~``, a backtick, ``_`` at a word's edge)
of one paragraph after this many are not markup either: markdown-it's cost per delimiter
is high (6 600 of them in 20 000 characters took 60–180 ms).  They are dropped, as an
unmatched delimiter is."""
_PLACEHOLDER = markdown_budget.PLACEHOLDER
"""Stands for markup past the caps (private use: the frontend's cleaning drops it)."""


@dataclass(frozen=True)
class MarkdownOptions:
    code_blocks: str = "skip"
    """``skip``: code blocks are not read; ``say``: ``code_phrase`` instead; ``read``: read."""
    code_phrase: str = "There is a code sample here."
    heading_pause_ms: int = 300
    rule_pause_ms: int = 500
    spent: int = 0
    """Budget units spent on text before this source (:func:`cost`): a text read in two
    parts (appliance.core.headfirst) cuts its budget where the whole text does."""
    paused_ms: int = 0
    """Heading and rule pauses given to text of the same request before this source (a
    text read in two parts, a text stream's earlier segments): the request's pauses add up
    to at most :data:`~appliance.text.ssml.MAX_TOTAL_BREAK_MS`, as an SSML document's
    breaks do; past it a heading or a rule gets what is left of it, then none."""


@dataclass(frozen=True)
class Block:
    """One thing read as a sentence (or more): its text, and the silence after it."""

    text: MappedText
    pause_after_ms: int = 0


def _parser(guarded: bool = True) -> MarkdownIt:
    """The parser ttsd reads with; ``guarded=False``: without
    :func:`~appliance.text.markdown_rules.install` (the same tokens, slower: the tests compare)."""
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING, "html": True})
    md.enable(["table", "strikethrough"])
    # Entities and escapes stay their own tokens (markup = the source form), so each decoded
    # character maps to the source it came from.
    md.disable("text_join")
    # markdown-it refuses javascript:, file:, vbscript: and data: links so that rendered HTML
    # cannot run them, and leaves such a link as its literal source ("[click](javascript:…)"
    # read aloud).  Nothing here renders or opens a link: every link is its text.
    md.validateLink = lambda url: True  # type: ignore[method-assign]
    return markdown_rules.install(md) if guarded else md


_MD = _parser()
"""The configured parser: stateless between calls (markdown-it keeps state per parse)."""

# A run of emphasis/strike/code delimiters; ``_`` only at a word's edge (snake_case stays).
_STRAY = re.compile(r"[*~`]+|(?<!\w)_+|(?<!_)_+(?!\w)")
# Heading hashes and table pipes where markdown-it saw none (a model's one-line "## x | y |").
_MARKS = re.compile(r"(?<!\w)#{1,6}(?!\w)|\|")
_MARKUP_CHARS = frozenset("*~`_#|")
_FOOTNOTE = re.compile(r"\[\^[^\]\s]{1,64}\](?::)?")
_BRACKET = re.compile(r"(?<!^)(?<!^ )(?<!^  )(?<!^   )\[|\[(?![^\[\]\\\n]{1,999}\]:)", re.M)
"""A bracket, but for one that opens a definition's label (``[label]:`` after at most three
spaces at a line's start; no bracket or backslash in the label, as in CommonMark's)."""
_DELIMITER = re.compile(r"[*~`]|(?<!\w)_|_(?!\w)")
_NEWLINE = re.compile("\n")
_BLANK_LINE = re.compile(r"(\n[ \t]*\n)")
_TAG = re.compile(r"<[^<>]*>")
_HIDDEN_HTML = re.compile(
    r"<(script|style)\b[^<>]*>.*?(?:</\1\s*>|\Z)|<!--.*?(?:-->|\Z)", re.I | re.S
)
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_READ = frozenset(
    (
        *("bullet_list_open", "ordered_list_open", "bullet_list_close", "ordered_list_close"),
        *("tr_close", "fence", "code_block", "html_block", "hr"),
    )
)
"""The block tokens :meth:`_Reader.read` acts on besides ``inline``."""
_ALNUM = re.compile(r"[^\W_]")
"""A letter or digit (``str.isalnum``), found in C, not a character at a time."""
_FINAL = frozenset(".!?:;,")
_CLOSERS = "\"')]"


def parse(source: str, options: MarkdownOptions | None = None) -> list[Block]:
    """The blocks of ``source`` in reading order (their text may be empty: a pause)."""
    return _Reader(source, options or MarkdownOptions()).read()


def cost(source: str) -> int:
    """The parse budget ``source`` spends (:func:`appliance.text.markdown_budget.cost` of
    what markdown-it is given), all of it read."""
    return markdown_budget.cost(_prepared(source))


def _prepared(source: str) -> str:
    """``source`` as markdown-it is given it, the same length: markdown-it folds CR LF and
    CR to LF (done here so that offsets are the source's), markup past the caps replaced."""
    return _cap_markup(source.replace("\r\n", " \n").replace("\r", "\n"))


@dataclass
class _Reader:
    source: str
    options: MarkdownOptions
    cursor: int = 0
    """Source offset before which no inline text is looked for any more."""
    line_starts: list[int] = field(default_factory=list)
    limit: int = 0
    """Source offset where the current block ends: text is looked for before it only (a
    piece not found costs the block's length, not the rest of the source)."""
    in_script: bool = False
    depth: int = 0
    """Lists open around the current token."""
    fence: str = ""
    """The run of a fence left open where markdown-it's part ends (its code goes on)."""
    pause_left: int = 0
    """Milliseconds of pause the request has left (:attr:`MarkdownOptions.paused_ms`)."""

    def __post_init__(self) -> None:
        self.text = _prepared(self.source)
        # markdown-it reads the text before the cut, read_plain the rest.
        self.cut = markdown_budget.budget_cut(self.text, self.options.spent)
        self.line_starts = [0]  # markdown-it's lines (its tokens' maps index them)
        self.line_starts.extend(m.end() for m in _NEWLINE.finditer(self.text, 0, self.cut))
        self.line_starts.append(len(self.text))
        self.limit = len(self.text)
        self.pause_left = max(0, ssml.MAX_TOTAL_BREAK_MS - self.options.paused_ms)

    def pause(self, ms: int) -> int:
        """A pause of ``ms`` as far as the request has any left: a 20 000-character source
        of headings would otherwise hold its stream for half an hour of silence."""
        given = min(ms, self.pause_left)
        self.pause_left -= given
        return given

    def line(self, k: int) -> int:
        return self.line_starts[min(k, len(self.line_starts) - 1)]

    def read(self) -> list[Block]:
        blocks: list[Block] = []
        row: list[MappedText] = []
        tokens = _MD.parse(self.text[: self.cut])
        for k, tok in enumerate(tokens):
            kind = tok.type
            if kind == "inline":
                mt = self.inline(tok)
                if tokens[k - 1].type in ("th_open", "td_open"):
                    row.append(mt)
                    continue
                heading = tokens[k - 1].type == "heading_open"
                # A paragraph is read as its text is written (plain text's very audio); a
                # heading or a list item is a sentence whatever its punctuation.
                if heading or self.depth:
                    mt = _sentence(mt)
                blocks.append(Block(mt, self.pause(self.options.heading_pause_ms * heading)))
            elif kind not in _READ:
                continue  # most tokens open or close what the inline tokens read
            elif kind in ("bullet_list_open", "ordered_list_open"):
                self.depth += 1
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.depth -= 1
            elif kind == "tr_close":
                blocks.append(Block(_sentence(_join_cells(row))))
                row = []
            elif kind in ("fence", "code_block"):
                blocks.extend(self.code(tok))
            elif kind == "html_block" and tok.map:
                a, b = self.line(tok.map[0]), self.line(tok.map[1])
                blocks.append(Block(_sentence(_strip_html(self.slice(a, b)))))
                self.cursor = max(self.cursor, b)
            elif kind == "hr":
                blocks.append(Block(MappedText("", (), ()), self.pause(self.options.rule_pause_ms)))
        return blocks + self.plain()

    def plain(self) -> list[Block]:
        """What lies past the budget, read plainly (:func:`markdown_budget.read_plain`)."""
        if self.cut >= len(self.text):
            return []
        opts = self.options
        read = markdown_budget.read_plain(
            self.text, self.cut, self.fence, opts.code_blocks, opts.code_phrase
        )
        return [Block(mt) for mt in read]

    def slice(self, a: int, b: int) -> MappedText:
        return MappedText(self.text[a:b], tuple(range(a, b)), tuple(range(a + 1, b + 1)))

    def find(self, piece: str, out: Builder, text: str | None = None) -> None:
        """Add ``text`` (default ``piece``) mapped to ``piece``'s next place in the source."""
        if not piece:
            return
        at = self.text.find(piece, self.cursor, self.limit)
        if at < 0:  # not found as written: said, at the cursor, zero width
            out.add(text if text is not None else piece, self.cursor, self.cursor)
            return
        if text is None:
            out.add_source(piece, at)
        else:
            out.add(text, at, at + len(piece))
        self.cursor = at + len(piece)

    def found(self, piece: str) -> MappedText:
        """:meth:`find` of one piece, its own text: most blocks are one text token, and
        this makes their text without a :class:`Builder`."""
        at = self.text.find(piece, self.cursor, self.limit) if piece else -1
        if at < 0:
            cursor = self.cursor
            return MappedText(piece, (cursor,) * len(piece), (cursor,) * len(piece))
        self.cursor = end = at + len(piece)
        return MappedText(piece, tuple(range(at, end)), tuple(range(at + 1, end + 1)))

    def inline(self, tok: Token) -> MappedText:
        if tok.map:
            self.cursor = max(self.cursor, self.line(tok.map[0]))
            self.limit = max(self.cursor, self.line(tok.map[1]))
        self.in_script = False  # an inline <script> left open ends with its paragraph
        children = tok.children or []
        if len(children) == 1 and children[0].type == "text":
            mt = self.found(children[0].content)
        else:
            out = Builder()
            self.children(children, out)
            mt = out.build()
        return _drop_stray(mt.sub(_FOOTNOTE, "") if "[^" in mt.text else mt)

    def children(self, children: list[Token], out: Builder) -> None:
        for child in children:
            kind = child.type
            if kind == "html_inline":
                self.tag(child.content, out)
            elif self.in_script:
                continue
            elif kind == "text":
                self.find(child.content, out)
            elif kind == "code_inline":
                self.code_span(child, out)
            elif kind == "text_special":
                self.find(child.markup, out, child.content)
            elif kind in ("softbreak", "hardbreak"):
                out.add(" ", self.cursor, self.cursor)
            elif kind == "image":
                self.children(child.children or [], out)

    def code_span(self, tok: Token, out: Builder) -> None:
        """Inline code: its text, found between its backticks (its line breaks are spaces
        in ``tok.content``, so it is not looked for as written)."""
        at = self.text.find(tok.markup, self.cursor, self.limit)
        close = self.text.find(tok.markup, at + len(tok.markup), self.limit) if at >= 0 else -1
        if close < 0:
            self.find(tok.content, out)
            return
        start, end = at + len(tok.markup), close
        inner = self.text[start:end]
        if len(inner) > 2 and inner[0] in " \n" and inner[-1] in " \n" and inner.strip():
            start, end = start + 1, end - 1  # CommonMark strips one space each side
        if end - start == len(tok.content):
            out.add_source(tok.content, start)
        else:
            out.add(tok.content, start, end)
        self.cursor = close + len(tok.markup)

    def tag(self, tag: str, out: Builder) -> None:
        """An inline HTML tag: dropped (a line break is a space); script text is not read."""
        name = tag[1:].lstrip("/").split(maxsplit=1)[0].rstrip(">/").lower() if tag else ""
        self.find(tag, Builder())
        if name in ("script", "style"):
            self.in_script = not tag.startswith("</")
        elif name == "br":
            out.add(" ", self.cursor, self.cursor)

    def code(self, tok: Token) -> list[Block]:
        mode = self.options.code_blocks
        a = self.line(tok.map[0]) if tok.map else self.cursor
        b = self.line(tok.map[1]) if tok.map else self.cursor
        if tok.type == "fence" and b >= self.cut and not self.closed(tok):
            self.fence = tok.markup  # the rest of the text begins in this fence's code
        self.cursor = max(self.cursor, a)
        self.limit = max(self.cursor, b)
        blocks: list[Block] = []
        if mode == "say" and self.options.code_phrase.strip():
            out = Builder()
            out.add(self.options.code_phrase, a, max(a, b - 1))
            blocks.append(Block(out.build()))
        elif mode == "read":
            out = Builder()
            for line in tok.content.split("\n"):
                self.find(line, out)
                out.add(" ", self.cursor, self.cursor)
            blocks.append(Block(_sentence(out.build())))
        self.cursor = max(self.cursor, b)
        return blocks

    def closed(self, tok: Token) -> bool:
        """Does the fence ``tok`` end with a closing line (not where markdown-it's part
        ends)?"""
        if not tok.map or tok.map[1] - tok.map[0] < 2:
            return False
        end = self.line(tok.map[1])
        last = self.text[self.line(tok.map[1] - 1) : end].strip(" \t\n>")
        return len(last) >= len(tok.markup) and not last.strip(tok.markup[0])


def _cap_markup(text: str) -> str:
    """``text`` with each paragraph's brackets and delimiters past the caps replaced (same
    length): markdown-it's cost stays linear and small whatever the source."""
    if text.count("[") <= MAX_BRACKETS and len(_DELIMITER.findall(text)) <= MAX_DELIMITERS:
        return text
    parts = _BLANK_LINE.split(text)  # paragraphs, and the blank lines between them
    for k, part in enumerate(parts):
        if len(part) > MAX_BRACKETS:  # (a shorter one is under both caps)
            parts[k] = _cap(_cap(part, _BRACKET, MAX_BRACKETS), _DELIMITER, MAX_DELIMITERS)
    return "".join(parts)


def _cap(part: str, pattern: re.Pattern[str], keep: int) -> str:
    """``part`` with ``pattern``'s matches (a character each) after the first ``keep``
    replaced: in C, no call per match (a paragraph under the cap costs one scan)."""
    past = next(itertools.islice(pattern.finditer(part), keep, None), None)
    if past is None:
        return part
    # Each match is one character: the rest matches alike from the first one past the cap
    # (that one, at the slice's start, may look like a line's start there: it is replaced).
    at = past.start()
    return part[:at] + _PLACEHOLDER + pattern.sub(_PLACEHOLDER, part[at:])[1:]


def _drop_stray(mt: MappedText) -> MappedText:
    """Delimiters markdown-it left as text, dropped; a run with space on both sides is text
    ("2 * 3"), not markup, and stays."""
    text = mt.text
    if _MARKUP_CHARS.isdisjoint(text):  # most inline text: no scan at all
        return mt

    def spaced(m: re.Match[str]) -> str | None:
        before = text[m.start() - 1 : m.start()]
        after = text[m.end() : m.end() + 1]
        return None if before.isspace() and after.isspace() else ""

    return mt.sub(_STRAY, spaced).sub(_MARKS, " ")


def _join_cells(cells: list[MappedText]) -> MappedText:
    out = Builder()
    end = -1  # source end of the last cell read
    for cell in cells:
        body = cell.text.strip()
        if not _ALNUM.search(body):
            continue
        if end >= 0:
            out.add(", ", end, end)
        lead = len(cell.text) - len(cell.text.lstrip())
        out.copy(cell, lead, lead + len(body))
        end = cell.ends[lead + len(body) - 1]
    return out.build()


def _sentence(mt: MappedText) -> MappedText:
    """``mt`` ending in sentence punctuation: a zero-width full stop where it has none."""
    body = mt.text.rstrip()
    tail = body.rstrip(_CLOSERS)
    if not tail or tail[-1] in _FINAL or not _ALNUM.search(body):
        return mt
    n = len(body)
    end = mt.ends[n - 1]
    return MappedText(body + ".", (*mt.starts[:n], end), (*mt.ends[:n], end))


def _strip_html(mt: MappedText) -> MappedText:
    """Raw HTML's text: scripts, styles and comments gone, tags dropped, entities decoded."""
    mt = _drop_stray(mt.sub(_HIDDEN_HTML, " ").sub(_TAG, " "))
    return mt.sub(_ENTITY, lambda m: html.unescape(m.group()))
