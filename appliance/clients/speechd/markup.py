"""Plain text and marks out of speech-dispatcher's SSML, for when ttsd cannot take the SSML.

speech-dispatcher hands modules SSML: ``<speak>`` around the text, ``<mark name="__spd_N"/>``
between sentences, ``&lt;`` for a literal ``<``.  ttsd parses SSML itself
(``text_format: "ssml"``); this module is the fallback for a daemon without it and for a
message too long for one request.  It is a scanner, not an XML parser: tags are dropped,
only ``<mark name=…/>`` is kept, the five predefined entities and numeric character
references are decoded, and nothing else is expanded — no DTD, no external entity, no
file is ever looked at, and its cost is linear in the text.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

_NAME_ATTR = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_ENTITY = re.compile(r"&(lt|gt|amp|quot|apos|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")
_PREDEFINED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}
_BREAKING = frozenset({"s", "p", "break", "speak", "sentence", "paragraph"})

MAX_MARK_NAME = 256


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class MarkItem:
    name: str


Item = Text | MarkItem


def _decode_entities(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        ref = m.group(1)
        if ref in _PREDEFINED:
            return _PREDEFINED[ref]
        code = int(ref[2:], 16) if ref.startswith("#x") else int(ref[1:])
        if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            return ""
        return chr(code)

    # Any other "&name;" stays as written: an undeclared entity is an error in XML, and
    # expanding one would mean trusting a declaration we never read.
    return _ENTITY.sub(one, text)


def to_items(ssml: str) -> list[Item]:
    """Text runs and marks in document order; text that is only whitespace is left out.

    Linear in the length whatever the input: every search moves forward, and a comment,
    declaration or processing instruction with no end swallows the rest of the text.
    """
    return _Scan(ssml).run()


class _Scan:
    """:func:`to_items`' state: where it is, the text run so far, the items made."""

    def __init__(self, ssml: str) -> None:
        self.s = ssml
        self.n = len(ssml)
        self.next_gt = -1
        """Cached position of the next ">" at or after the current "<"."""
        self.parts: list[str] = []
        self.items: list[Item] = []

    def run(self) -> list[Item]:
        s, i = self.s, 0
        while i < self.n:
            j = s.find("<", i)
            if j < 0:
                self.parts.append(s[i:])
                break
            self.parts.append(s[i:j])
            after = self._special(j)
            if after is None:
                after = self._markup(j)
            if after < 0:  # no end: it swallows the rest
                break
            i = after
        self._flush()
        return self.items

    def _flush(self) -> None:
        text = _decode_entities("".join(self.parts))
        self.parts.clear()
        if text.strip():
            self.items.append(Text(" ".join(text.split())))

    def _special(self, j: int) -> int | None:
        """Past a comment, CDATA section (its text kept) or processing instruction at
        ``j``; -1 when it has no end; None when there is none at ``j``."""
        s = self.s
        if s.startswith("<!--", j):
            k = s.find("-->", j + 4)
            return -1 if k < 0 else k + 3
        if s.startswith("<![CDATA[", j):
            k = s.find("]]>", j + 9)
            k = self.n if k < 0 else k
            self.parts.append(html.escape(s[j + 9 : k], quote=False))
            return k + 3
        if s.startswith("<?", j):
            k = s.find("?>", j + 2)
            return -1 if k < 0 else k + 2
        return None

    def _markup(self, j: int) -> int:
        """Past the declaration or tag at ``j`` (-1: a declaration with no end), or past a
        lone "<", which stays text."""
        s, n = self.s, self.n
        if self.next_gt < j:
            self.next_gt = s.find(">", j)
            if self.next_gt < 0:
                self.next_gt = n
        k = self.next_gt
        if s.startswith("<!", j):
            # A declaration (DOCTYPE and its internal subset) is skipped, never read.
            bracket = s.find("[", j, k)
            if bracket >= 0:
                close = s.find("]", bracket)
                k = s.find(">", close) if close >= 0 else -1
            return -1 if k < 0 or k >= n else k + 1
        if k >= n or s.find("<", j + 1, k) >= 0:
            self.parts.append("<")  # a lone bracket, not a tag
            return j + 1
        self._tag(s[j + 1 : k])
        return k + 1

    def _tag(self, body: str) -> None:
        closing = body.startswith("/")
        # ``<\n>``, ``</\t>``: no name at all (split gives nothing; indexing it raised).
        words = body.lstrip("/").split(None, 1)
        tag = words[0].rstrip("/").lower() if words else ""
        if tag == "mark" and not closing:
            found = _NAME_ATTR.search(body)
            if found:
                self._flush()
                name = _decode_entities(found.group(1) or found.group(2) or "")
                self.items.append(MarkItem(name[:MAX_MARK_NAME]))
            return
        # A sentence or paragraph edge must not glue two words together.
        self.parts.append(" " if tag in _BREAKING else "")


def split_long(text: str, limit: int) -> list[str]:
    """Pieces of at most ``limit`` characters, cut after a sentence end when there is one
    in the second half of the piece, else at a space, else hard."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[:limit]
        cut = max(window.rfind(". "), window.rfind("! "), window.rfind("? "))
        if cut < limit // 2:
            cut = window.rfind(" ")
        cut = cut + 1 if cut > 0 else limit
        pieces.append(rest[:cut].strip())
        rest = rest[cut:]
    if rest.strip():
        pieces.append(rest.strip())
    return [p for p in pieces if p]
