"""Client text → clauses ready to phonemize, each with its span in the original text.

Steps, in order: reject over-long text; NFKC and full-width punctuation to
ASCII; control and format characters removed; emoji and pictographs dropped
(espeak would otherwise spell "Hello😀" as letters and read the emoji's name);
whitespace collapsed; the script check (an English voice refuses text that is
mostly Han, instead of espeak's "Chinese letter" babble); the language's
normaliser (numbers, dates …); sentence split that keeps abbreviations inside
the sentence; long sentences cut into clauses.  Every step goes through
:class:`~appliance.textmap.MappedText`, so spans always point into the text
the client sent.  Nothing here parses markup: "<speak>" is just text.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from appliance.errors import ErrorCode
from appliance.errors import ServiceError as ProtocolError
from appliance.normalize import normalize
from appliance.textmap import MappedText


@dataclass(frozen=True)
class Clause:
    text: str
    span: tuple[int, int]
    """[start, end) in the original text."""
    sentence_end: bool
    word_spans: tuple[tuple[int, int], ...]
    """Original span of each word of the clause, in order."""


# Characters NFKC leaves alone but which are punctuation to a reader.
_PUNCT_MAP = {
    "。": ". ",
    "、": ", ",
    "「": '"',
    "」": '"',
    "『": '"',
    "』": '"',
    "〈": "(",
    "〉": ")",
    "《": '"',
    "》": '"',
    "【": "(",
    "】": ")",
    "・": " ",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "…": "...",
}
# Symbols (category So) that carry meaning and that the normaliser reads.
_KEEP_SYMBOLS = frozenset("°©®№")
_EMOJI_RANGES = (
    (0x1F000, 0x1FAFF),
    (0x2600, 0x27BF),
    (0x2B00, 0x2BFF),
    (0x2300, 0x23FF),
    (0xE0000, 0xE007F),
    (0xFE00, 0xFE0F),
    (0x1F1E6, 0x1F1FF),
)
# Families whose voices read Latin script; others are not checked.
_LATIN_FAMILIES = frozenset(
    "en de fr es it nl pt pl cs sk sl hr ro hu fi sv da no nb nn is ca eu gl cy ga tr "
    "vi id ms sw lb lv lt et sq".split()
)

ABBREVIATIONS = frozenset(
    "dr mr mrs ms prof sr jr st mt ave rd blvd etc vs e.g i.e a.m p.m approx dept est "
    "fig inc ltd co corp no vol jan feb mar apr jun jul aug sep sept oct nov dec "
    "mon tue wed thu fri sat sun gen col lt sgt capt rev".split()
)
# After these a capital letter still does not start a new sentence (titles, dates).
_NEVER_FINAL = frozenset(
    "dr mr mrs ms prof st mt sr jr e.g i.e vs no jan feb mar apr jun jul aug sep sept "
    "oct nov dec gen col lt sgt capt rev".split()
)


def _char_clean(ch: str) -> str:
    """NFKC + punctuation map + drop controls and pictographs, for one character."""
    if ch in _PUNCT_MAP:
        return _PUNCT_MAP[ch]
    if ch in "\t\n\r\v\f\u2028\u2029\x85":
        return " "
    cp = ord(ch)
    for lo, hi in _EMOJI_RANGES:
        if lo <= cp <= hi:
            return ""
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Cf", "Cs", "Co", "Cn"):
        return ""
    if cat == "So" and ch not in _KEEP_SYMBOLS:
        return ""
    if cat == "Sk" and 0x1F3FB <= cp <= 0x1F3FF:
        return ""
    out = unicodedata.normalize("NFKC", ch)
    if out != ch:
        return "".join(_PUNCT_MAP.get(c, c) for c in out)
    return ch


_SPACES = re.compile(r"\s+")


def clean(text: str) -> MappedText:
    mt = MappedText.identity(text).map_chars(_char_clean)
    return _strip(mt.sub(_SPACES, " "))


def check_script(mt: MappedText, language: str) -> MappedText:
    """Refuse text mostly in a script the voice cannot read; drop stray foreign letters."""
    family = language.replace("-", "_").split("_")[0].lower()
    if family not in _LATIN_FAMILIES:
        return mt
    letters = foreign = 0
    for ch in mt.text:
        if ch.isalpha():
            letters += 1
            if not unicodedata.name(ch, "").startswith("LATIN"):
                foreign += 1
    if letters and foreign * 2 > letters:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_TEXT,
            f"text is mostly in a script the voice ({language}) cannot speak",
        )
    if foreign:
        mt = mt.map_chars(
            lambda c: " " if c.isalpha() and not unicodedata.name(c, "").startswith("LATIN") else c
        ).sub(_SPACES, " ")
    return mt


_SENT_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")


def _is_abbreviation_end(text: str, dot: int) -> bool:
    """Is the '.' at ``dot`` the end of an abbreviation (or an initial) rather than a sentence?"""
    m = re.search(r"([A-Za-z][A-Za-z.]*)$", text[:dot])
    if not m:
        return False
    word = m.group(1).lower().rstrip(".")
    rest = text[dot + 1 :].lstrip(" \"')")
    nxt = rest[:1]
    if word in _NEVER_FINAL:
        return True
    if word in ABBREVIATIONS:
        # "etc." ends a sentence only when a capitalised sentence follows.
        return not (nxt.isupper())
    # Single initials ("J. R. R. Tolkien") stay inside.
    return len(word) == 1 and word.isalpha() and nxt.isupper()


def is_sentence_end_at(text: str, pos: int) -> bool:
    """Does the run of sentence punctuation at ``pos`` end a sentence ("Dr." does not)?"""
    m = _SENT_END.match(text, pos)
    if m is None:
        return False
    if text[pos] == "." and m.group().rstrip("\"')]") == ".":
        return not _is_abbreviation_end(text, pos)
    return True


def split_sentences(mt: MappedText) -> list[MappedText]:
    out: list[MappedText] = []
    start = 0
    text = mt.text
    for m in _SENT_END.finditer(text):
        if not is_sentence_end_at(text, m.start()):
            continue
        end = m.end()
        piece = mt.slice(start, end)
        if piece.text.strip():
            out.append(_strip(piece))
        start = end
    tail = mt.slice(start, len(mt))
    if tail.text.strip():
        out.append(_strip(tail))
    return out


def _strip(mt: MappedText) -> MappedText:
    a, b = 0, len(mt)
    while a < b and mt.text[a] == " ":
        a += 1
    while b > a and mt.text[b - 1] == " ":
        b -= 1
    return mt.slice(a, b)


_CLAUSE_BREAK = re.compile(r"[,;:](?=\s)|\s[-–—]\s")


def split_clauses(sentence: MappedText, max_chars: int, first_max: int) -> list[MappedText]:
    """Cut a sentence at , ; : and dashes so no clause is longer than ``max_chars``.

    The first clause of a request gets the tighter ``first_max``: its encoder
    time is the time to first audio.  Where punctuation does not help, cut at
    the last space before the limit.
    """
    pieces: list[MappedText] = []
    rest = sentence
    limit = first_max
    while len(rest) > limit:
        cut = -1
        for m in _CLAUSE_BREAK.finditer(rest.text, 0, limit + 1):
            if m.end() >= limit // 3:
                cut = m.end()
        if cut < 0:
            cut = rest.text.rfind(" ", limit // 3, limit + 1)
        if cut <= 0:
            cut = limit
        pieces.append(_strip(rest.slice(0, cut)))
        rest = _strip(rest.slice(cut, len(rest)))
        limit = max_chars
    if rest.text:
        pieces.append(rest)
    return [p for p in pieces if p.text]


_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class FrontendLimits:
    max_chars: int
    clause_chars: int
    first_clause_chars: int


def prepare(text: str, language: str, limits: FrontendLimits) -> list[Clause]:
    """The whole frontend for one request.  Raises :class:`ProtocolError`."""
    if len(text) > limits.max_chars:
        raise ProtocolError(
            ErrorCode.TEXT_TOO_LONG,
            f"text has {len(text)} characters; the limit is {limits.max_chars}",
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "text is not valid UTF-8")
    if not text.strip():
        raise ProtocolError(ErrorCode.EMPTY_TEXT, "text is empty")
    mt = clean(text)
    if not any(c.isalnum() for c in mt.text):
        raise ProtocolError(ErrorCode.EMPTY_TEXT, "text has nothing to speak")
    mt = check_script(mt, language)
    mt = normalize(mt, language)
    clauses: list[Clause] = []
    first = True
    for sentence in split_sentences(mt):
        parts = split_clauses(
            sentence,
            limits.clause_chars,
            limits.first_clause_chars if first else limits.clause_chars,
        )
        first = False
        for k, part in enumerate(parts):
            if not any(c.isalnum() for c in part.text):
                continue
            words = tuple(part.span(m.start(), m.end()) for m in _WORD.finditer(part.text))
            clauses.append(
                Clause(
                    text=part.text,
                    span=part.span(0, len(part)),
                    sentence_end=k == len(parts) - 1,
                    word_spans=words,
                )
            )
    if not clauses:
        raise ProtocolError(ErrorCode.EMPTY_TEXT, "text has nothing to speak")
    return clauses
