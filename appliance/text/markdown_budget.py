"""How much of a Markdown source markdown-it reads, and how the rest is read (issue 28).

markdown-it-py's cost is linear in the source but its constant is high where the source is
dense with markup: ~5 µs a line, ~2 µs for each character its inline parser stops at (most
punctuation), 10–40 µs a list item, quote, heading or table row, more for a link, an
autolink or an emphasis run.  20 000 characters of one-letter list items took ~200 ms.
So a source is given to markdown-it up to a budget: :func:`cost` prices each line, in
units of about a microsecond of parsing (markdown-it and the walk, measured with the
bench's hostile sources), and :func:`budget_cut` finds the first line past
:data:`BUDGET`.  Everything from that line on is read by :func:`read_plain`, in one pass
of one regular expression, at ~1 µs a line: a paragraph, list item, heading or table row a
sentence, block markers, tags and markup dropped — the words Markdown would say, in order.

The price of a line is :data:`LINE` (its newline), :data:`MARKER` for each block marker
that starts it (``>``, a bullet, an ordered item's number, a heading's hashes) and, for each
character, its weight in :data:`WEIGHTS` (a character markdown-it's inline parser stops
at, by what it can start; a letter or a space: nothing).  A line's price depends on that
line alone, so prices add up: a text cut in two (appliance.core.headfirst) reads its second
part with the first part's cost spent (``MarkdownOptions.spent``) and cuts where the whole
text does.  Prices are taken on the text markdown-it is given (markup past the per-paragraph
caps of :mod:`appliance.text.markdown` costs nothing: it is no longer markup).
"""

from __future__ import annotations

import bisect
import html
import itertools
import re
from dataclasses import dataclass, field

from appliance.text.textmap import Builder, MappedText

BUDGET = 16_000
"""Units of markdown-it's work per source (~16 ms of parsing on the bench's 2-core box, the
walk included).  A 2 kB language-model reply costs ~3 200 (tables, lists, emphasis), so
replies up to ~10 kB as dense as it, and much longer prose, are read whole as Markdown."""
LINE = 8
"""A line: markdown-it's block loop over it and, inside a paragraph, a softbreak token."""
MARKER = 25
"""A block marker at a line's start: a list item, quote or heading (tokens and rules)."""
MAX_MARKERS = 10
"""Markers a line's start is priced for (see :data:`_LEADS`)."""
WEIGHTS: dict[str, int] = {
    **dict.fromkeys("#$%+-:=@]^{}>", 2),  # the inline parser stops there, finds nothing
    "!": 4,  # an image's start: tried as one
    "\\": 4,  # an escape: a token
    "&": 6,  # an entity: a token
    "`": 6,  # a code span: a scan for its closing run
    **dict.fromkeys("*_~", 12),  # emphasis: a delimiter each, balanced per paragraph
    "|": 12,  # a table cell: its tokens
    "<": 30,  # an autolink (its address normalised twice) or an HTML tag
    "[": 40,  # a link or an image: label and destination scans, per paragraph
}
_MARKED = 1
"""The byte a block marker at a line's start becomes before pricing (:func:`_prices`)."""
_PRICES = bytes(
    MARKER if b == _MARKED else LINE if b == 10 else WEIGHTS.get(chr(b), 0) for b in range(256)
)
"""Each byte's price; a character past Latin-1 is encoded as ``?`` (price 0)."""
_LEADS = re.compile(
    rb"^[ \t]*(?:(?:>|(?:[-*+]|\d{1,9}[.)]|#{1,6})(?=[ \t\n]|$))[ \t]*){1,%d}" % MAX_MARKERS,
    re.M,
)
"""The block markers that start a line, up to :data:`MAX_MARKERS` (markdown-it follows 20
levels of nesting, a list and its item being two: deeper markers are text to it)."""
_MARKS = bytes.maketrans(b"-*+>.)#", bytes([_MARKED]) * 7)
"""A marker's own character (a bullet, ``>``, an item number's ``.`` or ``)``, a heading's
hash) marked; spaces and an item's digits are not."""


def _prices(text: str) -> bytes:
    """Each character's price, as a byte, block markers included: a line's price depends on
    that line only.  In C but for one call per line that starts with a marker."""
    data = text.encode("latin-1", "replace").replace(bytes([_MARKED]), b"?")
    data = _LEADS.sub(lambda m: m.group().translate(_MARKS), data)
    return data.translate(_PRICES)


def cost(text: str) -> int:
    """The parse cost of ``text``: the sum of its characters' (and so its lines') prices."""
    return sum(_prices(text))


def budget_cut(text: str, spent: int = 0) -> int:
    """The offset of the first line of ``text`` that takes the cost past :data:`BUDGET`,
    ``spent`` units being spent before it; ``len(text)``: none."""
    prices = _prices(text)
    left = BUDGET - spent
    if sum(prices) <= left:  # most texts
        return len(text)
    # The first character past the budget (prices are not negative: the running sums are
    # sorted), and the start of its line.
    past = bisect.bisect_right(list(itertools.accumulate(prices)), left)
    return text.rfind("\n", 0, past) + 1


PLACEHOLDER = "\ue000"
"""Stands for a markup character that is dropped (here, and past markdown's caps): the same
length, so the map stays the source's; private use, so the frontend's cleaning drops it."""
_MARKUP = str.maketrans(dict.fromkeys("*~`[]", PLACEHOLDER) | {"|": " "})
"""Emphasis, strike, code and bracket characters dropped wherever they are (a spaced run, "2 *
3", is kept: :data:`_PLAIN`'s ``spaced``), a table's pipe a space: in C, one call a piece."""
_TRAILERS = " \t\"')*~`|\\[\\]"
_TRAILER = f"[{_TRAILERS}]"
"""What may follow a line's last word before its end (closers and markup)."""
_PLAIN = re.compile(
    # An alternative is tried only where one can start: most characters, and a space inside
    # a line, are passed over at once.  A line's end is looked at only after a word (where
    # ``stop`` can match): looked at from each character of a run of trailers, or from each
    # of many blank lines, it made the scan quadratic ("|" × 19 999 + "a": 1.5 s) or slow.
    # The most frequent alternatives come first.
    rf"(?=[<&\[\]!*~`_#>+\-\d]|\Z|^[ \t]|(?<=[^\W_])[\n{_TRAILERS}])(?:"
    rf"(?<=[^\W_])(?P<stop>{_TRAILER}*(?:\n(?P<gap>[ \t]*\n)?|\Z))"
    r"|^(?P<fence>[ \t>]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)*(?P<run>`{3,}|~{3,})[^\n]*"
    r"(?P<code>[\s\S]*?)(?:\n[ \t>]*(?P=run)[`~]*[ \t]*(?=\n|\Z)|\Z))"
    r"|^(?P<lead>[ \t]*(?:(?:>|(?:[-*+]|\d{1,9}[.)]|#{1,6})(?=[ \t\n]|$))[ \t]*)+)"
    r"|(?P<drop>^ {0,3}\[[^\[\]\\\n]{1,999}\]:[ \t]*+(?:<[^<>\n]*>|[^\s<]\S*+)"
    r"(?:[ \t]++(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*+(?:\n|\Z)"
    r"|\]\((?:[^()\s]|\([^()\s]*\))*\)|(?<!\[)(?:\[*!\[)+|\[\^[^\]\s]{1,64}\]"
    r"|(?<!\w)_+|(?<!_)_+(?!\w)"
    r"|(?<!\w)#+(?!\w)|<(?P<name>(?i:script|style))\b[^<>]*>[\s\S]*?(?:</(?P=name)\s*>|\Z)"
    r"|<!--[\s\S]*?(?:-->|\Z)|<(?![A-Za-z][A-Za-z0-9+.\-]{1,31}:)/?[A-Za-z][^<>\n]*>)"
    r"|(?<=\s)(?P<spaced>[*~`]+)(?=\s)"
    r"|<(?P<url>[A-Za-z][A-Za-z0-9+.\-]{1,31}:[^<>\s]*)>"
    r"|(?P<entity>&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});)"
    r")",
    re.M,
)
"""What the plain reading adds, drops, keeps or decodes, in one alternation: the end of a
line whose last word has no sentence punctuation (a full stop is added after the word if the
line is an item, a heading or a row, or ends a paragraph: a blank line follows), a fenced
block (to its closing line or the end), a line's block markers, what
is dropped (a link's destination, an image's ``!``, a footnote marker, ``_`` at a word's
edge, a lone ``#``, hidden HTML — a script, a style, a comment —, a tag, a link reference
definition's line: ``[label]: destination "title"``), a spaced run of
``*``, ``~`` or backticks (text: kept), an autolink (its address is read), an entity
(decoded)."""
_LINE_END = re.compile(r"[ \t]*(?:\n|\Z)")
_GAP = re.compile(r"[ \t]*\n[ \t]*\n")
"""A line's end, then a blank line: a paragraph ends."""
_ALNUM = re.compile(r"[^\W_]")
_FINAL = frozenset(".!?:;,")
_TRAILING = " \t*_~`#|<>[]\"')"
"""Stripped from a line's end before its last character is looked at."""


@dataclass
class _Plain(Builder):
    """The plain reading of ``text`` from an offset: its blocks' texts.  A builder whose
    lines of plain text go straight into its lists (:meth:`keep`, :meth:`stop`: a
    :meth:`add_source` call per piece cost twice as much: thousands of lines are read here)."""

    text: str
    code_blocks: str
    code_phrase: str
    kept: int = 0
    """Source offset up to which the text is in :attr:`parts` (or dropped)."""
    item: int = -1
    """The start of the last line that began with a list item's or a heading's marker."""
    ends_at: list[int] = field(default_factory=list)
    """Where each block read so far ends in the text built."""

    def __post_init__(self) -> None:
        Builder.__init__(self)

    def read(self, start: int, fence: str) -> list[MappedText]:
        self.kept = self.open_fence(start, fence) if fence else start
        for m in _PLAIN.finditer(self.text, self.kept):
            kind = m.lastgroup
            if kind == "stop":  # most lines of a long plain part
                if m["gap"] is not None or self.sentence(m.start()):
                    self.stop(m.start())
                continue
            a, b = m.span()
            self.keep(a)
            if kind == "lead" and m.group().strip(" \t>"):
                self.item = a  # a list item or a heading: a sentence, as in Markdown
            elif kind != "lead" and kind != "drop":
                self.replace(m, kind)
            self.kept = b
            if kind != "lead" and kind != "fence" and self.line_ends(b):
                self.end_line(a, b, kind)
        self.keep(len(self.text))
        return self.paragraphs()

    def paragraph(self) -> None:
        """A block ends here (a fenced block is one of its own, as in Markdown)."""
        self.ends_at.append(len(self._starts))

    def paragraphs(self) -> list[MappedText]:
        """The blocks read, each with text: one text and map, sliced."""
        built = self.build()
        text, starts, ends = built.text, built.starts, built.ends
        cuts = [0, *self.ends_at, len(text)]
        return [
            MappedText(text[a:b], starts[a:b], ends[a:b])
            for a, b in itertools.pairwise(cuts)
            if text[a:b].strip()
        ]

    def sentence(self, at: int) -> bool:
        """Is the line ``at`` is on a list item, a heading or a table row (a sentence, with a
        full stop where it has none, as in Markdown; a paragraph's line is not)?"""
        line = self.text.rfind("\n", 0, at) + 1
        return line == self.item or self.text.find("|", line, at) >= 0

    def keep(self, end: int) -> None:
        """The source up to ``end``, its markup characters dropped."""
        a = self.kept
        if end > a:
            self._parts.append(self.text[a:end].translate(_MARKUP))
            self._starts.extend(range(a, end))
            self._ends.extend(range(a + 1, end + 1))
            self.kept = end

    def stop(self, a: int) -> None:
        """:meth:`keep` up to ``a`` and a zero-width full stop there, in one call (most lines
        of a long plain part end so)."""
        k = self.kept
        self._parts += (self.text[k:a].translate(_MARKUP), ".")
        self._starts.extend(range(k, a + 1))
        self._ends.extend(range(k + 1, a + 1))
        self._ends.append(a)
        self.kept = a

    def replace(self, m: re.Match[str], kind: str | None) -> None:
        """A fenced block, an autolink, a spaced run, an entity: what is said for it."""
        if kind == "fence":
            self.code(m.start(), m.start("code"), m.end("code"))
        elif kind == "entity":
            self.add(html.unescape(m.group()), m.start(), m.end())
        elif kind is not None:  # an autolink's address, a spaced run: as they stand
            self.add_source(m[kind], m.start(kind))

    def line_ends(self, b: int) -> bool:
        """Does the line end at ``b`` (after spaces or not)?"""
        after = self.text[b : b + 1]
        return after in ("\n", "") or (after in " \t" and bool(_LINE_END.match(self.text, b)))

    def end_line(self, a: int, b: int, kind: str | None) -> None:
        """A line that ends with what was matched at [a, b): a full stop after it when the
        line is a sentence (or a paragraph's last) and ends in a word (dropped markup after
        it; an address or an entity said)."""
        ends = self.sentence(a) or _GAP.match(self.text, b)
        if ends and _said(self.text, b if kind in ("url", "entity", "spaced") else a):
            self.add(".", b, b)

    def open_fence(self, start: int, run: str) -> int:
        """The code of a fence the Markdown before ``start`` left open, to its closing line
        (or the end); where reading goes on."""
        close = re.compile(rf"^[ \t>]*{re.escape(run)}[`~]*[ \t]*$", re.M).search(self.text, start)
        if close is None:
            self.code(start, start, len(self.text))
            return len(self.text)
        self.code(start, start, close.start())
        return close.end()

    def code(self, a: int, inner: int, end: int) -> None:
        """A fenced block from ``a``, its code from ``inner`` to ``end``: skipped, said as
        the code phrase, or read, as ``code_blocks`` says; a block of its own, as in
        Markdown (the paragraph before it ends)."""
        self.paragraph()
        if self.code_blocks == "say" and self.code_phrase.strip():
            self.add(" " + self.code_phrase + " ", a, max(a, end))
        elif self.code_blocks == "read" and end > inner:
            self.add_source(self.text[inner:end], inner)
            self.add(". ", end, end)
        self.paragraph()


def _said(text: str, at: int) -> bool:
    """Does the line ``at`` is on end in a word, with no sentence punctuation after it?"""
    line = text[text.rfind("\n", 0, at) + 1 : at]
    body = line.rstrip(_TRAILING)
    return bool(body) and body[-1] not in _FINAL and bool(_ALNUM.search(body))


def read_plain(
    text: str, start: int, fence: str, code_blocks: str, code_phrase: str
) -> list[MappedText]:
    """``text`` from ``start`` read plainly, its blocks (a fenced block is one, the text
    between two others another): a list item, a heading, a table row and a paragraph (its
    lines up to a blank line) are sentences (a full stop added where they end in a word), a
    paragraph's other lines are read as written; block markers (``#``, ``>``, bullets,
    numbers), table pipes, tags, a link's destination and markup characters are dropped,
    entities decoded, an autolink is its address; fenced code is skipped, said or read as
    ``code_blocks`` says.  ``fence``: the run (```` ``` ````, ``~~~``) of a fence the text
    before ``start`` left open; empty: none."""
    return _Plain(text, code_blocks, code_phrase).read(start, fence)
