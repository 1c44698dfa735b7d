"""The SSML subset ttsd speaks, parsed safely into a neutral document.

The parser is the standard library's expat with every door to the outside shut, the way
defusedxml shuts them (we need expat's byte positions for ``text_span``, which defusedxml's
ElementTree front does not give): a DOCTYPE is refused (so no entity can be declared: no
billion laughs, no external entity), parameter-entity parsing is off, external and skipped
entity references are refused, processing instructions and comments are ignored.  Nothing
here opens a file or a URL: ``<audio src>``, ``<lexicon uri>`` and every other attribute
naming one are read as strings and dropped.

Limits: the source (characters, as sent) within ``max_chars`` (``text_too_long``), element
depth within :data:`MAX_DEPTH` and the breaks' total within :data:`MAX_TOTAL_BREAK_MS`
(``bad_request``); malformed XML is ``bad_request`` with the line and column expat reports.
Numbers in attributes are read as floats and cut to finite bounds before any arithmetic.

The output, :class:`SsmlDocument`, knows nothing about voices: the spoken text as a
:class:`~appliance.text.textmap.MappedText` whose characters point into the SSML source, and
positions in that text for breaks, marks and sentence/paragraph boundaries, plus spans for
prosody, say-as, sub and phoneme.  The frontend turns it into clauses.
"""

from __future__ import annotations

import bisect
import re
import xml.parsers.expat as expat
from dataclasses import dataclass, field
from typing import Any

from appliance.errors import ErrorCode, ServiceError
from appliance.text.textmap import MappedText

MAX_DEPTH = 32
MAX_BREAK_MS = 10_000
"""A longer ``<break time>`` is cut to this (a break is a pause, not a way to hold a stream)."""
MAX_TOTAL_BREAK_MS = 60_000
"""The breaks of one document add up to at most this, each after its own cut, or the
document is ``bad_request``: 300 breaks of 10 s in 6 KB would otherwise hold a stream (and
the speaker) for 50 minutes of silence.  The one cap on a request's pauses: Markdown's
heading and rule pauses add up to at most this too (:mod:`appliance.text.markdown`; they
are the daemon's, not asked for, so the pauses past it are left out, not refused)."""
MAX_DB = 120.0
"""``+NdB`` / ``-NdB`` beyond this is taken as this (10**(6200/20) overflows a float; the
product is clamped to :data:`VOLUME_RANGE` anyway)."""
MAX_FACTOR = 1e6
"""A rate or volume factor beyond this is taken as this, so products of nested prosody
stay finite (``1e400%`` is inf, and silent × inf is NaN)."""
MAX_MARK_NAME = 256

# Break strengths in ms (SSML leaves them to the processor; documented in docs/ssml.md).
BREAK_STRENGTHS = {
    "none": 0,
    "x-weak": 100,
    "weak": 200,
    "medium": 400,
    "strong": 700,
    "x-strong": 1000,
}
RATE_LABELS = {
    "x-slow": 0.5,
    "slow": 0.75,
    "medium": 1.0,
    "default": 1.0,
    "fast": 1.25,
    "x-fast": 1.5,
}
VOLUME_LABELS = {
    "silent": 0.0,
    "x-soft": 0.3,
    "soft": 0.5,
    "medium": 1.0,
    "default": 1.0,
    "loud": 1.4,
    "x-loud": 2.0,
}
RATE_RANGE = (0.5, 2.0)
VOLUME_RANGE = (0.0, 2.0)

SAY_AS_KINDS = frozenset("characters spell-out cardinal ordinal digits date time telephone".split())
# Other names for the same readings, as other engines spell them.
_SAY_AS_ALIASES = {"verbatim": "characters", "number": "cardinal", "letters": "characters"}

_STRUCTURE = {"p": "p", "paragraph": "p", "s": "s", "sentence": "s"}
# Elements whose content is never spoken: they describe or reference something else.
_SILENT = frozenset({"lexicon", "meta", "metadata", "desc", "lookup", "info"})
# Elements whose tag is dropped and whose text is spoken as is (documented, not warned about).
_TRANSPARENT = frozenset({"speak", "lang", "emphasis", "voice", "audio", "token", "w"})

_TIME = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s)\s*\Z")
_PERCENT = re.compile(r"\s*([+-]?)(\d+(?:\.\d+)?|\.\d+)\s*%\s*\Z")
_DB = re.compile(r"\s*([+-]?)(\d+(?:\.\d+)?|\.\d+)\s*dB\s*\Z", re.IGNORECASE)
_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*\Z")


def _bad(message: str) -> ServiceError:
    return ServiceError(ErrorCode.BAD_REQUEST, message)


@dataclass(frozen=True)
class Break:
    position: int
    """Position in :attr:`SsmlDocument.text` (the break sits before that character)."""
    ms: int
    source_offset: int = 0
    """Where the ``<break/>`` element starts in the source (characters)."""


@dataclass(frozen=True)
class Mark:
    position: int
    name: str
    source_offset: int
    """Where the ``<mark/>`` element starts in the source (characters)."""


@dataclass(frozen=True)
class Boundary:
    position: int
    kind: str
    """``"s"`` (sentence) or ``"p"`` (paragraph); one at each start and end of the element."""


Event = Break | Mark | Boundary


@dataclass(frozen=True)
class ProsodySpan:
    start: int
    end: int
    rate: float
    """Speed factor (2 = twice as fast), already multiplied by enclosing prosody."""
    volume: float
    """Gain factor, already multiplied by enclosing prosody."""


@dataclass(frozen=True)
class SayAsSpan:
    start: int
    end: int
    interpret_as: str
    """One of :data:`SAY_AS_KINDS`, or another name (then the text is read normally)."""
    format: str | None


@dataclass(frozen=True)
class SubSpan:
    start: int
    end: int
    alias: str


@dataclass(frozen=True)
class PhonemeSpan:
    start: int
    end: int
    ph: str
    """IPA as written in ``ph`` (validated against a voice later)."""


@dataclass(frozen=True)
class TextPiece:
    text: str
    span: tuple[int, int]
    """[start, end) in the SSML source as sent (characters)."""


@dataclass(frozen=True)
class SsmlDocument:
    source: str
    text: MappedText
    """The spoken text; every character maps into :attr:`source`."""
    pieces: tuple[TextPiece, ...]
    events: tuple[Event, ...]
    """Breaks, marks and boundaries in document order."""
    prosody: tuple[ProsodySpan, ...] = ()
    say_as: tuple[SayAsSpan, ...] = ()
    subs: tuple[SubSpan, ...] = ()
    phonemes: tuple[PhonemeSpan, ...] = ()

    @property
    def breaks(self) -> tuple[Break, ...]:
        return tuple(e for e in self.events if isinstance(e, Break))

    @property
    def marks(self) -> tuple[Mark, ...]:
        return tuple(e for e in self.events if isinstance(e, Mark))

    @property
    def boundaries(self) -> tuple[Boundary, ...]:
        return tuple(e for e in self.events if isinstance(e, Boundary))


def parse_break_time(value: str) -> int:
    m = _TIME.match(value)
    if m is None:
        raise _bad(f"<break time={value!r}>: expected a duration such as 250ms or 1.5s")
    ms = float(m.group(1)) * (1000.0 if m.group(2) == "s" else 1.0)
    # Cut before rounding: 400 nines are inf, and round(inf) raises.
    return round(min(float(MAX_BREAK_MS), ms))


def parse_rate(value: str) -> float:
    v = value.strip().lower()
    if v in RATE_LABELS:
        return RATE_LABELS[v]
    m = _PERCENT.match(v)
    if m is not None:
        pct = float(m.group(2))
        # "+20%"/"-20%": a change; "120%": the rate itself (SSML 1.1).
        factor = 1.0 + (pct if m.group(1) == "+" else -pct) / 100.0 if m.group(1) else pct / 100.0
    elif (m := _NUMBER.match(v)) is not None:
        factor = float(m.group(1))
    else:
        raise _bad(f"<prosody rate={value!r}>: expected x-slow … x-fast, N%, +N% or a number")
    if factor <= 0:
        raise _bad(f"<prosody rate={value!r}>: the rate must be positive")
    return min(factor, MAX_FACTOR)


def parse_volume(value: str) -> float:
    v = value.strip().lower()
    if v in VOLUME_LABELS:
        return VOLUME_LABELS[v]
    m = _DB.match(v)
    if m is not None:
        db = min(float(m.group(2)), MAX_DB) * (-1.0 if m.group(1) == "-" else 1.0)
        return float(10.0 ** (db / 20.0))
    m = _PERCENT.match(v)
    if m is not None:
        pct = float(m.group(2))
        if m.group(1):
            return min(max(0.0, 1.0 + (pct if m.group(1) == "+" else -pct) / 100.0), MAX_FACTOR)
        return min(pct / 100.0, MAX_FACTOR)
    raise _bad(f"<prosody volume={value!r}>: expected silent … x-loud, +NdB, -NdB or N%")


def _clamp(x: float, lo_hi: tuple[float, float]) -> float:
    lo, hi = lo_hi
    return min(hi, max(lo, x))


@dataclass
class _Open:
    name: str
    start: int
    """Position in the spoken text where the element starts."""
    kind: str
    attrs: dict[str, str] = field(default_factory=dict)
    content_start: int | None = None
    """Source offset of the first text inside (for <sub>)."""
    source_start: int = 0


class _Parser:
    def __init__(self, source: str, data: bytes) -> None:
        self.source = source
        self.data = data
        self.ascii = len(data) == len(source)
        self._char_at_byte: list[int] | None = None
        self.parts: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.length = 0
        self.pieces: list[TextPiece] = []
        self.events: list[Event] = []
        self.prosody: list[ProsodySpan] = []
        self.say_as: list[SayAsSpan] = []
        self.subs: list[SubSpan] = []
        self.phonemes: list[PhonemeSpan] = []
        self.stack: list[_Open] = []
        self.silent = 0
        self.in_cdata = False
        self.rate = [1.0]
        self.volume = [1.0]
        self.break_ms = 0
        p = expat.ParserCreate()
        p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        p.StartDoctypeDeclHandler = self._refuse_doctype
        p.EntityDeclHandler = self._refuse_entity
        p.UnparsedEntityDeclHandler = self._refuse_entity
        p.ExternalEntityRefHandler = self._refuse_external
        p.SkippedEntityHandler = self._refuse_skipped
        p.StartElementHandler = self._start
        p.EndElementHandler = self._end
        p.CharacterDataHandler = self._data
        p.StartCdataSectionHandler = self._cdata_start
        p.EndCdataSectionHandler = self._cdata_end
        self.p = p

    # --- positions ----------------------------------------------------------------------------

    def _char(self, byte_index: int) -> int:
        if self.ascii:
            return byte_index
        if self._char_at_byte is None:
            starts: list[int] = []
            pos = 0
            for ch in self.source:
                starts.append(pos)
                pos += len(ch.encode("utf-8"))
            self._char_at_byte = starts
        return bisect.bisect_left(self._char_at_byte, byte_index)

    def _here(self) -> int:
        return self._char(self.p.CurrentByteIndex)

    # --- refused constructs -------------------------------------------------------------------

    def _where(self) -> str:
        return f"line {self.p.CurrentLineNumber}, column {self.p.CurrentColumnNumber + 1}"

    def _refuse_doctype(self, *args: Any) -> None:
        raise _bad(f"SSML: a DOCTYPE is not accepted ({self._where()})")

    def _refuse_entity(self, *args: Any) -> None:
        raise _bad(f"SSML: entity declarations are not accepted ({self._where()})")

    def _refuse_external(self, *args: Any) -> int:
        raise _bad(f"SSML: external entities are not accepted ({self._where()})")

    def _refuse_skipped(self, name: str, is_parameter_entity: bool) -> None:
        raise _bad(f"SSML: undefined entity &{name}; ({self._where()})")

    # --- elements -----------------------------------------------------------------------------

    def _start(self, raw_name: str, attrs: dict[str, str]) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise _bad(f"SSML: elements nested deeper than {MAX_DEPTH} ({self._where()})")
        name = raw_name.rsplit(":", 1)[-1].lower()
        here = self._here()
        el = _Open(name, self.length, name, attrs, source_start=here)
        self.stack.append(el)
        if self.silent or name in _SILENT:
            el.kind = "silent"
            self.silent += 1
        elif name in _STRUCTURE:
            el.kind = _STRUCTURE[name]
            self.events.append(Boundary(self.length, el.kind))
        elif name == "break":
            ms = self._break_ms(attrs)
            self._count_break(ms)
            self.events.append(Break(self.length, ms, here))
        elif name == "mark":
            self.events.append(Mark(self.length, self._mark_name(attrs), here))
        elif name == "prosody":
            rate = parse_rate(attrs["rate"]) if "rate" in attrs else 1.0
            volume = parse_volume(attrs["volume"]) if "volume" in attrs else 1.0
            # pitch, range, contour, duration: accepted and ignored (docs/ssml.md).
            self.rate.append(_clamp(self.rate[-1] * rate, RATE_RANGE))
            self.volume.append(_clamp(self.volume[-1] * volume, VOLUME_RANGE))
        elif name == "sub":
            if "alias" in attrs:
                el.kind = "sub"
                self.silent += 1  # the content is replaced by the alias
            else:
                el.kind = "other"
        elif name == "phoneme":
            alphabet = attrs.get("alphabet", "ipa").strip().lower()
            if alphabet != "ipa":
                raise _bad(f"<phoneme alphabet={alphabet!r}>: only ipa is supported")
            if not attrs.get("ph", "").strip():
                raise _bad(f"<phoneme> needs a ph attribute ({self._where()})")
        elif name == "say-as":
            if "interpret-as" not in attrs:
                raise _bad(f"<say-as> needs interpret-as ({self._where()})")
        elif name not in _TRANSPARENT:
            el.kind = "other"  # unknown: tag dropped, text spoken

    def _end(self, raw_name: str) -> None:
        el = self.stack.pop()
        here = self._here()
        if el.kind == "silent":
            self.silent -= 1
            return
        name = el.name
        if el.kind in ("s", "p"):
            self.events.append(Boundary(self.length, el.kind))
        elif name == "prosody":
            rate, volume = self.rate.pop(), self.volume.pop()
            if self.length > el.start and (rate != 1.0 or volume != 1.0):
                self.prosody.append(ProsodySpan(el.start, self.length, rate, volume))
        elif el.kind == "sub":
            self.silent -= 1
            alias = el.attrs["alias"]
            a = el.content_start if el.content_start is not None else el.source_start
            b = here if el.content_start is not None else max(here, a)
            if alias.strip() and not self.silent:
                start = self.length
                self._emit(alias, a, b)
                self.subs.append(SubSpan(start, self.length, alias))
        elif name == "phoneme" and self.length > el.start:
            self.phonemes.append(PhonemeSpan(el.start, self.length, el.attrs["ph"].strip()))
        elif name == "say-as" and self.length > el.start:
            kind = el.attrs["interpret-as"].strip().lower()
            kind = _SAY_AS_ALIASES.get(kind, kind)
            fmt = el.attrs.get("format")
            self.say_as.append(SayAsSpan(el.start, self.length, kind, fmt))

    def _break_ms(self, attrs: dict[str, str]) -> int:
        if "time" in attrs:
            return parse_break_time(attrs["time"])
        strength = attrs.get("strength", "medium").strip().lower()
        if strength not in BREAK_STRENGTHS:
            raise _bad(
                f"<break strength={strength!r}>: expected one of {', '.join(BREAK_STRENGTHS)}"
            )
        return BREAK_STRENGTHS[strength]

    def _count_break(self, ms: int) -> None:
        self.break_ms += ms
        if self.break_ms > MAX_TOTAL_BREAK_MS:
            raise _bad(
                f"SSML: the breaks add up to more than {MAX_TOTAL_BREAK_MS // 1000} s"
                f" ({self._where()}); that is the limit for one request"
            )

    def _mark_name(self, attrs: dict[str, str]) -> str:
        name = attrs.get("name")
        if not name:
            raise _bad(f"<mark> needs a name ({self._where()})")
        if len(name) > MAX_MARK_NAME:
            raise _bad(f"<mark name>: longer than {MAX_MARK_NAME} characters")
        return name

    # --- text ---------------------------------------------------------------------------------

    def _data(self, text: str) -> None:
        here = self._here()
        for el in self.stack:
            if el.kind == "sub" and el.content_start is None:
                el.content_start = here
        if self.silent or not text:
            return
        if self.in_cdata or (
            self.source.startswith(text, here) and not self.source.startswith("&", here)
        ):
            self._emit_identity(text, here)
        else:
            # An entity or character reference ("&amp;" → "&"), or "\r\n" → "\n": the
            # text stands for the whole reference.
            if self.source.startswith("&", here):
                semi = self.source.find(";", here)
                end = semi + 1 if semi >= 0 else here + 1
            elif self.source.startswith("\r\n", here):
                end = here + 2
            else:
                end = here + 1
            self._emit(text, here, end)

    def _cdata_start(self) -> None:
        self.in_cdata = True

    def _cdata_end(self) -> None:
        self.in_cdata = False

    def _emit_identity(self, text: str, start: int) -> None:
        end = start + len(text)
        self.parts.append(text)
        self.starts.extend(range(start, end))
        self.ends.extend(range(start + 1, end + 1))
        self._piece(text, start, end)

    def _emit(self, text: str, start: int, end: int) -> None:
        self.parts.append(text)
        self.starts.extend([start] * len(text))
        self.ends.extend([end] * len(text))
        self._piece(text, start, end)

    def _piece(self, text: str, start: int, end: int) -> None:
        self.length += len(text)
        if self.pieces and self.pieces[-1].span[1] == start:
            last = self.pieces[-1]
            self.pieces[-1] = TextPiece(last.text + text, (last.span[0], end))
        else:
            self.pieces.append(TextPiece(text, (start, end)))

    def run(self) -> SsmlDocument:
        try:
            self.p.Parse(self.data, True)
        except expat.ExpatError as exc:
            reason = expat.errors.messages.get(exc.code, str(exc)) if exc.code else str(exc)
            # expat counts columns in bytes; say characters, as an editor does.
            at = self._char(max(0, self.p.ErrorByteIndex))
            column = at - (self.source.rfind("\n", 0, at) + 1) + 1
            raise _bad(
                f"SSML is not well-formed: {reason} (line {exc.lineno}, column {column})"
            ) from None
        finally:
            # The parser's handlers are this object's methods: a cycle that only a
            # collection would free, with the document's text and lists.
            del self.p
        return SsmlDocument(
            source=self.source,
            text=MappedText("".join(self.parts), tuple(self.starts), tuple(self.ends)),
            pieces=tuple(self.pieces),
            events=tuple(self.events),
            prosody=tuple(self.prosody),
            say_as=tuple(self.say_as),
            subs=tuple(self.subs),
            phonemes=tuple(self.phonemes),
        )


def parse(source: str | bytes, max_chars: int) -> SsmlDocument:
    """Parse ``source`` (the SSML as sent).  Raises :class:`ServiceError`.

    ``text_too_long`` past ``max_chars`` characters; ``bad_request`` for invalid UTF-8,
    malformed XML (with line and column), a DOCTYPE or entity, nesting deeper than
    :data:`MAX_DEPTH`, or an invalid attribute value of a known element.
    """
    if isinstance(source, bytes):
        if len(source) > 4 * max_chars:
            raise ServiceError(
                ErrorCode.TEXT_TOO_LONG, f"SSML is longer than the limit of {max_chars} characters"
            )
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad(f"SSML is not valid UTF-8 (byte {exc.start})") from None
    if len(source) > max_chars:
        raise ServiceError(
            ErrorCode.TEXT_TOO_LONG,
            f"SSML has {len(source)} characters; the limit is {max_chars}",
        )
    try:
        data = source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _bad(f"SSML is not valid UTF-8 (character {exc.start})") from None
    return _Parser(source, data).run()
