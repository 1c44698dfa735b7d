"""Client text → clauses ready to phonemize, each with its span in the original text.

Steps, in order: reject over-long text; NFKC and full-width punctuation to
ASCII; control and format characters removed; emoji and pictographs dropped
(espeak would otherwise spell "Hello😀" as letters and read the emoji's name);
whitespace collapsed; the script check (an English voice refuses text that is
mostly Han, instead of espeak's "Chinese letter" babble); the language's
normaliser (numbers, dates …); sentence split that keeps abbreviations inside
the sentence; long sentences cut into clauses.  Every step goes through
:class:`~appliance.text.textmap.MappedText`, so spans always point into the text
the client sent.

Plain text (``text_format="text"``) is never parsed as markup: "<speak>" is just text, and
Piper-style inline phonemes ``[[ … ]]`` are read as text too (use SSML ``<phoneme>``).
With ``text_format="ssml"`` the source goes through :mod:`appliance.text.ssml` first; its
structure cuts the text into segments (at breaks, ``<s>``/``<p>`` and prosody changes),
each segment goes through the same steps, and the clauses carry the extras: pauses, marks,
speed, volume and phoneme overrides.  A user lexicon (:mod:`appliance.text.lexicon`) applies to
both, after normalisation.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import re
import string
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from appliance.errors import ErrorCode
from appliance.errors import ServiceError as ProtocolError
from appliance.text import markdown, ssml
from appliance.text.cuts.clause import latency_cut, long_sentence_cut
from appliance.text.normalize import normalize, say_as
from appliance.text.textmap import Builder, MappedText

if TYPE_CHECKING:
    from appliance.text.lexicon import LanguageLexicon, Lexicon

TEXT_FORMATS = ("text", "ssml", "markdown")


@dataclass(frozen=True)
class ClauseMark:
    """An SSML ``<mark/>`` inside a clause."""

    name: str
    position: int
    """Character position in :attr:`Clause.text` (0: before the clause's first sound,
    ``len(text)``: after its last)."""
    source_offset: int = 0
    """Where the element starts in the source: orders a mark and a pause at one position."""


@dataclass(frozen=True)
class ClausePause:
    """An SSML ``<break>`` between two words of a clause: silence spliced into the
    sentence's audio at that word gap, so the sentence is still encoded whole."""

    position: int
    """Character position in :attr:`Clause.text`, strictly inside it."""
    ms: int
    source_offset: int
    """Where the (first) ``<break/>`` element starts in the source."""


@dataclass(frozen=True)
class PhonemeOverride:
    """Characters of a clause said with the given phonemes instead of espeak's."""

    start: int
    end: int
    """[start, end) in :attr:`Clause.text`."""
    ipa: str
    """The voice's espeak IPA symbols, as written (checked against the voice's map)."""


@dataclass(frozen=True)
class Clause:
    text: str
    span: tuple[int, int]
    """[start, end) in the original text."""
    sentence_end: bool
    word_spans: tuple[tuple[int, int], ...]
    """Original span of each word of the clause, in order."""
    # SSML extras; plain text leaves the defaults.
    pause_before_ms: int = 0
    """Silence before the clause's audio (``<break>``)."""
    pause_after_ms: int = 0
    """Silence after it (a ``<break>`` at the very end)."""
    marks: tuple[ClauseMark, ...] = ()
    pauses: tuple[ClausePause, ...] = ()
    """``<break>`` s between the clause's words, in order (one per position)."""
    speed: float = 1.0
    """``<prosody rate>``: multiplies the request's speed."""
    volume: float = 1.0
    """``<prosody volume>``: multiplies the request's volume."""
    phonemes: tuple[PhonemeOverride, ...] = ()
    """``<phoneme>`` and lexicon IPA entries, in order, not overlapping."""


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
# Printable ASCII comes out of _char_clean unchanged; only the rest is looked at, and only
# whitespace other than a lone space is rewritten (a 20 000-character text is cleaned in
# a few milliseconds: text streams clean what waits on the event loop).
_UNCLEAN = re.compile(r"[^\x20-\x7e]")
_SPACE_RUNS = re.compile(r"\s{2,}|[^\S ]")


def _cleaned(m: re.Match[str]) -> str | None:
    ch = m.group()
    new = _char_clean(ch)
    return None if new == ch else new


def clean(text: str) -> MappedText:
    return clean_mapped(MappedText.identity(text))


def clean_mapped(mt: MappedText, strip: bool = True) -> MappedText:
    out = mt.sub(_UNCLEAN, _cleaned).sub(_SPACE_RUNS, " ")
    return _strip(out) if strip else out


def _latin_voice(language: str) -> bool:
    return language.replace("-", "_").split("_")[0].lower() in _LATIN_FAMILIES


def _is_foreign(ch: str) -> bool:
    return ch.isalpha() and not unicodedata.name(ch, "").startswith("LATIN")


def check_script(mt: MappedText, language: str) -> MappedText:
    """Refuse text mostly in a script the voice cannot read; drop stray foreign letters."""
    if not _latin_voice(language):
        return mt
    letters = foreign = 0
    for ch in mt.text:
        if ch.isalpha():
            letters += 1
            if _is_foreign(ch):
                foreign += 1
    if letters and foreign * 2 > letters:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_TEXT,
            f"text is mostly in a script the voice ({language}) cannot speak",
        )
    if foreign:
        mt = _drop_foreign(mt)
    return mt


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def has_foreign_letters(text: str, language: str) -> bool:
    """Does ``text`` hold a letter :func:`check_script` counts against a voice of
    ``language`` (its verdict on a text then depends on the whole text)?"""
    return _latin_voice(language) and any(_is_foreign(m.group()) for m in _NON_ASCII.finditer(text))


def _drop_foreign(mt: MappedText) -> MappedText:
    return mt.map_chars(lambda c: " " if _is_foreign(c) else c).sub(_SPACE_RUNS, " ")


# A run of sentence punctuation with its closing quotes and brackets, before whitespace or
# the end.  Possessive: a run not followed by whitespace fails at once; backtracking through
# every shorter run made "." × 20 000 cost 8 s inside one regex call that held the GIL.
_SENT_RUN = r"[.!?]++[\"')\]]*+(?=\s|$)"
_SENT_END = re.compile(_SENT_RUN)
# The splitter tries a run only where it starts: tried at each of its characters, a long
# run is quadratic even with possessive quantifiers.
_SENT_END_SCAN = re.compile(r"(?<![.!?])" + _SENT_RUN)
_WORD_CHARS = frozenset(string.ascii_letters + ".")
_LONGEST_WORD = 64
"""A run of letters and dots longer than this before a '.' is no abbreviation (the word is
looked for in bounded time, whatever the text around it)."""


def _word_before(text: str, dot: int) -> str | None:
    """The letters-and-dots word that ends at ``dot``, from its first letter; None if none."""
    lo = max(0, dot - _LONGEST_WORD)
    start = dot
    while start > lo and text[start - 1] in _WORD_CHARS:
        start -= 1
    if start == lo and lo > 0 and text[lo - 1] in _WORD_CHARS:
        return None  # longer than any abbreviation or initial
    while start < dot and text[start] == ".":
        start += 1
    return text[start:dot] if start < dot else None


def _next_char(text: str, pos: int) -> str:
    """The first character at or after ``pos`` that is not a space, quote or ')'."""
    n = len(text)
    while pos < n and text[pos] in " \"')":
        pos += 1
    return text[pos : pos + 1]


def _is_abbreviation_end(text: str, dot: int) -> bool:
    """Is the '.' at ``dot`` the end of an abbreviation (or an initial) rather than a sentence?

    Looks only at the word before and the character after: no copy of the text around it,
    which made a text of many short sentences quadratic."""
    found = _word_before(text, dot)
    if found is None:
        return False
    word = found.lower().rstrip(".")
    nxt = _next_char(text, dot + 1)
    if word in _NEVER_FINAL:
        return True
    if word in ABBREVIATIONS:
        # "etc." ends a sentence only when a capitalised sentence follows.
        return not (nxt.isupper())
    # Single initials ("J. R. R. Tolkien") stay inside.
    return len(word) == 1 and word.isalpha() and nxt.isupper()


def _ends_sentence(text: str, m: re.Match[str]) -> bool:
    if m.group().rstrip("\"')]") == ".":
        return not _is_abbreviation_end(text, m.start())
    return True


def is_sentence_end_at(text: str, pos: int) -> bool:
    """Does the run of sentence punctuation at ``pos`` end a sentence ("Dr." does not)?"""
    m = _SENT_END.match(text, pos)
    return m is not None and _ends_sentence(text, m)


_FINAL_TAIL = re.compile(r"(?<![.!?])(?:\.|[!?]++)[\"')\]]*+$")
_OPENERS = "\"'([{*_`~"
_URL_CHARS = frozenset("/=&@:#%\\")


def ends_finally(text: str) -> int:
    """Where a sentence end that no text after it can undo ends ``text``; 0: none.

    ``?`` and ``!`` after a word, and a single ``.`` after a word of two or more letters
    that is no abbreviation: "Dr.", "e.g.", "U.S.", "J.", "3." and "etc." may still be
    followed by more of their sentence ("3.50", "J. R. R. Tolkien") and wait for the text
    after them, as does "..." (it may grow) and a word with a URL's characters ("x.com/a?b").
    """
    m = _FINAL_TAIL.search(text)
    if m is None or m.start() == 0 or text[m.start() - 1].isspace():
        return 0
    word = text[: m.start()].rsplit(None, 1)[-1] if text[: m.start()].strip() else ""
    word = word.lstrip(_OPENERS)
    if not word or _URL_CHARS.intersection(word):
        return 0
    if m.group().startswith("."):
        letters = word.replace("'", "").replace("-", "")
        if len(letters) < 2 or not letters.isalpha() or word.lower() in ABBREVIATIONS:
            return 0
    elif not _sayable(word):
        return 0
    return m.end() if is_sentence_end_at(text, m.start()) else 0


def split_sentences(mt: MappedText) -> list[MappedText]:
    """Sentences of ``mt``, in time linear in its length."""
    out: list[MappedText] = []
    start = 0
    text = mt.text
    for m in _SENT_END_SCAN.finditer(text):
        if not _ends_sentence(text, m):
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


def split_clauses(sentence: MappedText, max_chars: int, first_max: int = 0) -> list[MappedText]:
    """A sentence as the pieces it is encoded in: whole when it fits ``max_chars``.

    A sentence is encoded whole, as piper-tts does, so that it keeps its own intonation
    and no pause comes where it has none.  A longer one is cut at its last ``; :`` or
    spaced dash within the limit, else its last comma, and at a bare space only where a
    clause alone is over the limit (the last space within it, else the limit itself).

    ``first_max`` (0: off) is the latency option ``streaming.first_clause_chars``: the
    first piece is cut after at most that many characters, at a clause mark or else a
    space past a third of it — what the encoder of the first piece costs, the first
    packet waits for, but the cut is heard as a pause and an intonation reset.
    """
    pieces: list[MappedText] = []
    text = sentence.text
    a = 0
    limit = first_max if 0 < first_max < max_chars else max_chars
    quick = limit != max_chars
    # Cuts are found in a window of the text, and each piece is sliced once: slicing what
    # is left after every cut was quadratic in a long sentence.
    while len(text) - a > limit:
        window = text[a : a + limit + 1]
        cut = latency_cut(window, limit) if quick else long_sentence_cut(window, limit)
        pieces.append(_strip(sentence.slice(a, a + cut)))
        a += cut
        while a < len(text) and text[a] == " ":
            a += 1
        limit, quick = max_chars, False
    if a < len(text):
        pieces.append(sentence.slice(a, len(text)))
    return [p for p in pieces if p.text]


_WORD = re.compile(r"\S+")


def _word_span(part: MappedText, i: int, j: int) -> tuple[int, int]:
    """The source span of the spoken word ``part.text[i:j]``: its letters' and digits', and
    the punctuation around them only where it stands beside them in the source too (a
    Markdown link's "park." ends before "](https://…)", whose full stop comes after it)."""
    text = part.text
    core = [k for k in range(i, j) if text[k].isalnum()]
    if not core:
        return part.span(i, j)
    a, b = core[0], core[-1] + 1
    lo, hi = part.span(a, b)
    while a > i and part.ends[a - 1] == lo:
        a -= 1
        lo = part.starts[a]
    while b < j and part.starts[b] == hi:
        hi = part.ends[b]
        b += 1
    return lo, hi


@dataclass(frozen=True)
class FrontendLimits:
    max_chars: int
    """Longest text of one request (``text_too_long``)."""
    sentence_chars: int
    """Longest sentence encoded whole (``streaming.max_sentence_chars``)."""
    first_clause_chars: int = 0
    """The latency option's cut of the first sentence; 0: off (see :func:`split_clauses`)."""


def _sayable(text: str) -> bool:
    """Has ``text`` anything a voice would say (a letter or a digit; punctuation alone is
    silent)?"""
    return any(c.isalnum() for c in text)


def _nothing_to_speak(what: str) -> ProtocolError:
    return ProtocolError(ErrorCode.EMPTY_TEXT, f"{what} has nothing to speak")


def _said(clauses: list[Clause], what: str) -> list[Clause]:
    """``clauses``, if there are any (the ``what`` had something to speak)."""
    if not clauses:
        raise _nothing_to_speak(what)
    return clauses


def _check_source(text: str, limits: FrontendLimits) -> None:
    """The checks before any parsing: length, UTF-8, not blank."""
    if len(text) > limits.max_chars:
        raise ProtocolError(
            ErrorCode.TEXT_TOO_LONG,
            f"text has {len(text)} characters; the limit is {limits.max_chars}",
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "text is not valid UTF-8")
    if not text.strip():
        raise ProtocolError(ErrorCode.EMPTY_TEXT, "text is empty")


def prepare(
    text: str,
    language: str,
    limits: FrontendLimits,
    *,
    text_format: str = "text",
    lexicon: Lexicon | None = None,
    markdown_options: markdown.MarkdownOptions | None = None,
) -> list[Clause]:
    """The whole frontend for one request.  Raises :class:`ProtocolError`.

    ``text_format="ssml"``: ``text`` is SSML (see :func:`prepare_ssml`); ``"markdown"``:
    Markdown read as a person reads it (:func:`prepare_markdown`, with
    ``markdown_options``).  ``lexicon``: the user's pronunciations, applied after
    normalisation.
    """
    if text_format == "ssml":
        return prepare_ssml(text, language, limits, lexicon=lexicon)
    if text_format == "markdown":
        return prepare_markdown(text, language, limits, lexicon=lexicon, options=markdown_options)
    if text_format != "text":
        raise ProtocolError(
            ErrorCode.BAD_REQUEST, f"text_format must be one of {', '.join(TEXT_FORMATS)}"
        )
    _check_source(text, limits)
    mt = clean(text)
    if not _sayable(mt.text):
        raise _nothing_to_speak("text")
    words = lexicon.for_language(language) if lexicon is not None else None
    return _said(_plain_clauses(check_script(mt, language), language, limits, words, True), "text")


def _plain_clauses(
    mt: MappedText,
    language: str,
    limits: FrontendLimits,
    words: LanguageLexicon | None,
    first: bool,
) -> list[Clause]:
    """Cleaned, script-checked text → its clauses (normalised, split, lexicon applied)."""
    mt = normalize(mt, language)
    clauses: list[Clause] = []
    for sentence in split_sentences(mt):
        parts = split_clauses(
            sentence, limits.sentence_chars, limits.first_clause_chars if first else 0
        )
        first = False
        for k, part in enumerate(parts):
            if not _sayable(part.text):
                continue
            clauses.append(_clause(part, k == len(parts) - 1, words))
    return clauses


# --- Markdown ----------------------------------------------------------------------------------


def prepare_markdown(
    source: str,
    language: str,
    limits: FrontendLimits,
    *,
    lexicon: Lexicon | None = None,
    options: markdown.MarkdownOptions | None = None,
) -> list[Clause]:
    """Markdown → clauses, each block (heading, paragraph, list item, table row …) its own
    sentence; spans index ``source`` as sent.  See :mod:`appliance.text.markdown`."""
    _check_source(source, limits)
    words = lexicon.for_language(language) if lexicon is not None else None
    clauses: list[Clause] = []
    for block in markdown.parse(source, options):
        mt = clean_mapped(block.text)
        if _sayable(mt.text):
            made = _plain_clauses(check_script(mt, language), language, limits, words, not clauses)
            clauses.extend(made)
        if block.pause_after_ms and clauses:
            last = clauses[-1]
            pause = min(ssml.MAX_BREAK_MS, last.pause_after_ms + block.pause_after_ms)
            clauses[-1] = dataclasses.replace(last, pause_after_ms=pause)
    return _said(clauses, "Markdown")


def _clause(
    part: MappedText,
    sentence_end: bool,
    words: LanguageLexicon | None,
    fixed: tuple[tuple[int, int, str], ...] = (),
    marks: list[ssml.Mark] | None = None,
    speed: float = 1.0,
    volume: float = 1.0,
    breaks: list[ssml.Break] | None = None,
) -> Clause:
    """One clause from its text.

    ``fixed``: source ranges said with the given IPA (``<phoneme>``); ``marks`` and
    ``breaks``: SSML marks and breaks inside this clause, placed before the first character
    that comes after them in the source (a break at either end becomes the clause's
    ``pause_before_ms`` or ``pause_after_ms``).
    """
    lo, hi = part.span(0, len(part))
    # Only the <phoneme> ranges of this clause (a document may have many).
    fixed = tuple((a, b, ipa) for a, b, ipa in fixed if a < hi and lo < b)
    protected = [(a, b) for a, b, _ in fixed]
    if words is not None:
        part = words.respell(part, protected)

    def position(source_offset: int) -> int:
        return sum(1 for st in part.starts if st < source_offset)

    clause_marks = tuple(
        ClauseMark(m.name, position(m.source_offset), m.source_offset) for m in marks or ()
    )

    def word_start(pos: int) -> int:  # a break sits before the next word
        while pos < len(part) and part.text[pos] == " ":
            pos += 1
        return pos

    before, pauses, after = _place_breaks(
        [(word_start(position(b.source_offset)), b) for b in breaks or ()], len(part)
    )
    overrides: list[PhonemeOverride] = []
    for a, b, ipa in fixed:
        inside = [k for k, st in enumerate(part.starts) if a <= st < b]
        if inside:
            overrides.append(PhonemeOverride(inside[0], inside[-1] + 1, ipa))
    if words is not None:
        taken = [(o.start, o.end) for o in overrides]
        overrides.extend(
            PhonemeOverride(i, j, ipa) for i, j, ipa in words.phoneme_matches(part.text, taken)
        )
    overrides.sort(key=lambda o: o.start)
    spans = tuple(_word_span(part, m.start(), m.end()) for m in _WORD.finditer(part.text))
    return Clause(
        text=part.text,
        span=part.span(0, len(part)),
        sentence_end=sentence_end,
        word_spans=spans,
        phonemes=tuple(overrides),
        marks=clause_marks,
        speed=speed,
        volume=volume,
        pause_before_ms=before,
        pause_after_ms=after,
        pauses=pauses,
    )


def _place_breaks(
    placed: list[tuple[int, ssml.Break]], length: int
) -> tuple[int, tuple[ClausePause, ...], int]:
    """Breaks at their clause positions → (ms before the clause, pauses inside, ms after).

    Breaks at one place add up, to one break's maximum: silence is sent as samples."""
    before = after = 0
    inside: dict[int, ClausePause] = {}
    for pos, br in placed:
        if pos <= 0:
            before = min(ssml.MAX_BREAK_MS, before + br.ms)
        elif pos >= length:
            after = min(ssml.MAX_BREAK_MS, after + br.ms)
        elif pos in inside:
            was = inside[pos]
            inside[pos] = dataclasses.replace(was, ms=min(ssml.MAX_BREAK_MS, was.ms + br.ms))
        else:
            inside[pos] = ClausePause(pos, br.ms, br.source_offset)
    return before, tuple(inside[p] for p in sorted(inside) if inside[p].ms > 0), after


# --- SSML --------------------------------------------------------------------------------------


class _Spanned(Protocol):
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


S = TypeVar("S", bound=_Spanned)


class _SpanIndex(Generic[S]):
    """Spans sorted by start, for "which overlap [lo, hi)" without a scan of all of them
    (a document can hold thousands of elements and as many segments)."""

    def __init__(self, spans: Iterable[S]) -> None:
        self.spans = sorted(spans, key=lambda sp: (sp.start, -sp.end))
        self.starts = [sp.start for sp in self.spans]
        self.longest = max((sp.end - sp.start for sp in self.spans), default=0)

    def overlapping(self, lo: int, hi: int) -> list[S]:
        i = bisect.bisect_left(self.starts, lo - self.longest)
        j = bisect.bisect_left(self.starts, hi)
        return [sp for sp in self.spans[i:j] if sp.end > lo]


@dataclass
class _Segment:
    """Spoken text between two structure points (break, <s>/<p>, prosody change)."""

    start: int
    end: int
    speed: float
    volume: float
    marks: list[ssml.Mark] = dataclasses.field(default_factory=list)
    """Marks strictly inside the segment's text."""
    breaks: list[ssml.Break] = dataclasses.field(default_factory=list)
    """Breaks strictly inside it: a break does not cut a sentence (see ClausePause)."""


def _segments(
    doc: ssml.SsmlDocument, prosody: _SpanIndex[ssml.ProsodySpan]
) -> list[_Segment | ssml.Event]:
    """Text segments and the breaks, marks and boundaries between them, in order.

    Segments are cut at ``<s>``/``<p>`` boundaries and prosody changes; marks and breaks
    inside a segment stay in it."""
    n = len(doc.text)
    cuts = {0, n}
    for ev in doc.events:
        if isinstance(ev, ssml.Boundary):
            cuts.add(ev.position)
    for pr in doc.prosody:
        cuts.update((pr.start, pr.end))
    points = sorted(cuts)
    at: dict[int, list[ssml.Event]] = {}
    inside: list[ssml.Mark | ssml.Break] = []
    for ev in doc.events:
        if isinstance(ev, ssml.Mark | ssml.Break) and ev.position not in cuts:
            inside.append(ev)
        else:
            at.setdefault(ev.position, []).append(ev)
    out: list[_Segment | ssml.Event] = []
    inner_i = 0
    for a, b in zip(points, [*points[1:], n], strict=True):
        out.extend(at.get(a, ()))
        if b <= a:
            continue
        speed = volume = 1.0
        # The innermost prosody around the segment: its factors include the outer ones.
        around = [pr for pr in prosody.overlapping(a, b) if pr.start <= a and b <= pr.end]
        if around:
            inner = max(around, key=lambda pr: (pr.start, -pr.end))
            speed, volume = inner.rate, inner.volume
        seg = _Segment(a, b, speed, volume)
        while inner_i < len(inside) and inside[inner_i].position < b:
            ev = inside[inner_i]
            if isinstance(ev, ssml.Mark):
                seg.marks.append(ev)
            else:
                seg.breaks.append(ev)
            inner_i += 1
        out.append(seg)
    return out


Run = tuple[int, int, ssml.SayAsSpan | ssml.PhonemeSpan | None]


def _runs(
    seg: _Segment, index: _SpanIndex[ssml.SayAsSpan | ssml.PhonemeSpan], breaks: set[int]
) -> list[Run]:
    """The segment's text as runs: say-as and phoneme content (the outermost of nested
    ones), and the plain text between them, cut where a break sits."""
    special: list[Run] = []
    last_end = seg.start
    for span in index.overlapping(seg.start, seg.end):  # by start, outermost first
        a, b = max(span.start, seg.start), min(span.end, seg.end)
        if a < b and a >= last_end:  # not inside one taken already
            special.append((a, b, span))
            last_end = b
    runs: list[Run] = []
    pos = seg.start
    at = sorted(breaks)
    for a, b, special_span in [*special, (seg.end, seg.end, None)]:
        cuts = at[bisect.bisect_right(at, pos) : bisect.bisect_left(at, a)]
        for x, y in itertools.pairwise([pos, *cuts, a]):
            runs.append((x, y, None))
        if a < b:
            runs.append((a, b, special_span))
        pos = max(pos, b)
    return runs


def _segment_text(
    doc: ssml.SsmlDocument,
    seg: _Segment,
    language: str,
    index: _SpanIndex[ssml.SayAsSpan | ssml.PhonemeSpan],
) -> MappedText:
    """Clean and normalise one segment; say-as and phoneme content go their own way, and
    a break between two words keeps them two words (``x<break/>y`` is "x y")."""
    out = Builder()
    latin = _latin_voice(language)
    need_space = wrote = False
    prev_end = 0
    breaks = {br.position for br in seg.breaks}
    for a, b, sp in _runs(seg, index, breaks):
        need_space = need_space or a in breaks
        raw = doc.text.slice(a, b)
        mt = clean_mapped(raw, strip=False)
        if latin:
            mt = _drop_foreign(mt)
        lead = mt.text[:1] == " "
        trail = mt.text[-1:] == " "
        mt = _strip(mt)
        if isinstance(sp, ssml.SayAsSpan):
            mt = say_as(mt, sp.interpret_as, sp.format, language) if mt.text else mt
        elif sp is None:
            mt = normalize(mt, language)
        if not mt.text:
            need_space = need_space or lead or trail
            continue
        if wrote and (need_space or lead):
            out.add(" ", prev_end, prev_end)  # zero width: between the two runs' sources
        out.copy(mt, 0, len(mt))
        prev_end = mt.ends[-1]
        wrote = True
        need_space = trail
    return _strip(out.build().sub(_SPACES, " "))


def prepare_ssml(
    source: str,
    language: str,
    limits: FrontendLimits,
    *,
    lexicon: Lexicon | None = None,
) -> list[Clause]:
    """SSML → clauses with pauses, marks, speed, volume and phoneme overrides.

    Spans index ``source`` as sent.  Breaks become ``pause_before_ms`` of the next clause
    (``pause_after_ms`` of the last one at the end); a mark goes to the clause whose sound
    follows it (position 0), or to the end of the clause before when a break or the end of
    the document comes first.
    """
    doc = ssml.parse(source, limits.max_chars)
    whole = clean_mapped(doc.text)
    if not _sayable(whole.text):
        raise _nothing_to_speak("SSML")
    check_script(whole, language)
    words = lexicon.for_language(language) if lexicon is not None else None
    special: _SpanIndex[ssml.SayAsSpan | ssml.PhonemeSpan] = _SpanIndex(
        [*doc.say_as, *doc.phonemes]
    )
    clauses: list[Clause] = []
    pending_pause = 0
    pending_marks: list[str] = []
    first = True

    def flush_marks_to_end() -> None:
        if clauses and pending_marks:
            last = clauses[-1]
            extra = tuple(ClauseMark(n, len(last.text)) for n in pending_marks)
            clauses[-1] = dataclasses.replace(last, marks=last.marks + extra)
            pending_marks.clear()

    for item in _segments(doc, _SpanIndex(doc.prosody)):
        if isinstance(item, ssml.Break):
            flush_marks_to_end()
            # Breaks in a row add up, to one break's maximum: silence is sent as samples.
            pending_pause = min(ssml.MAX_BREAK_MS, pending_pause + item.ms)
        elif isinstance(item, ssml.Mark):
            pending_marks.append(item.name)
        elif isinstance(item, ssml.Boundary):
            if clauses and not clauses[-1].sentence_end and item.position > 0:
                clauses[-1] = dataclasses.replace(clauses[-1], sentence_end=True)
        else:
            made = _segment_clauses(doc, item, language, limits, words, special, first)
            if not made:
                pending_marks.extend(m.name for m in item.marks)
                pending_pause = min(
                    ssml.MAX_BREAK_MS, pending_pause + sum(b.ms for b in item.breaks)
                )
                continue
            first = False
            head = made[0]
            made[0] = dataclasses.replace(
                head,
                pause_before_ms=min(ssml.MAX_BREAK_MS, head.pause_before_ms + pending_pause),
                marks=tuple(ClauseMark(n, 0) for n in pending_marks) + head.marks,
            )
            pending_pause = 0
            pending_marks.clear()
            clauses.extend(made)
    if not clauses:
        raise _nothing_to_speak("SSML")
    flush_marks_to_end()
    if not clauses[-1].sentence_end:
        clauses[-1] = dataclasses.replace(clauses[-1], sentence_end=True)
    if pending_pause:
        after = min(ssml.MAX_BREAK_MS, clauses[-1].pause_after_ms + pending_pause)
        clauses[-1] = dataclasses.replace(clauses[-1], pause_after_ms=after)
    return clauses


def _segment_clauses(
    doc: ssml.SsmlDocument,
    seg: _Segment,
    language: str,
    limits: FrontendLimits,
    words: LanguageLexicon | None,
    special: _SpanIndex[ssml.SayAsSpan | ssml.PhonemeSpan],
    first: bool,
) -> list[Clause]:
    mt = _segment_text(doc, seg, language, special)
    # <phoneme> content as source ranges: the clauses find theirs by the character map.
    fixed = tuple(
        (doc.text.starts[p.start], doc.text.ends[p.end - 1], p.ph)
        for p in special.overlapping(seg.start, seg.end)
        if isinstance(p, ssml.PhonemeSpan)
    )
    parts: list[tuple[MappedText, bool]] = []
    for sentence in split_sentences(mt):
        pieces = split_clauses(
            sentence, limits.sentence_chars, limits.first_clause_chars if first else 0
        )
        first = False
        parts.extend((p, k == len(pieces) - 1) for k, p in enumerate(pieces) if _sayable(p.text))
    spans = [p.span(0, len(p)) for p, _ in parts]

    def clause_of(src: int) -> int:
        return next((i for i, sp in enumerate(spans) if sp[1] > src), len(parts) - 1)

    placed: list[list[ssml.Mark]] = [[] for _ in parts]
    placed_breaks: list[list[ssml.Break]] = [[] for _ in parts]
    for mark in seg.marks if parts else ():
        placed[clause_of(mark.source_offset)].append(mark)
    for br in seg.breaks if parts else ():
        placed_breaks[clause_of(br.source_offset)].append(br)
    clauses = [
        _clause(
            p,
            end,
            words,
            fixed,
            placed[k],
            speed=seg.speed,
            volume=seg.volume,
            breaks=placed_breaks[k],
        )
        for k, (p, end) in enumerate(parts)
    ]
    if clauses and not _ENDS_SENTENCE.search(clauses[-1].text):
        # The segment stops inside a sentence (a break, a prosody change): an <s>, <p> or
        # the end of the document says where the sentence ends.
        clauses[-1] = dataclasses.replace(clauses[-1], sentence_end=False)
    return clauses


_ENDS_SENTENCE = re.compile(r"[.!?][\"')\]]*$")
