"""The user's lexicon: words and phrases said the user's way.

A YAML file (``voices.lexicon`` in the config), one mapping per language; a language key
is a family (``en``: every English voice) or a voice language (``en_GB``: that dialect
only, taking precedence over the family)::

    en:
      ttsd: {ipa: "tˌiːtˌiːˌɛsdˈiː"}     # the voice's espeak IPA symbols
      Nguyen: {say: "win"}              # a respelling, read as text
      Kubernetes: "koo ber net eez"     # shorthand for {say: ...}
    en_GB:
      tomato: {ipa: "təmˈɑːtəʊ"}

Entries match whole words or phrases, case-insensitively, in the text *after*
normalisation (so an entry for "two" also catches "2"; write entries in words).  IPA
entries are checked against every loaded voice of their language (a symbol the voice has
no id for is an error naming it); respellings are plain text.  A pronunciation is at most
four times its phrase plus 24 characters (:func:`max_pronunciation_chars`).  The daemon
loads the file at start and again on SIGHUP; ``ttsd check-config`` validates it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.errors import ServiceError
from appliance.ops.config import ConfigError, parse_yaml, read_config_text
from appliance.text.phonemize import ipa_symbols
from appliance.text.textmap import MappedText

if TYPE_CHECKING:
    from appliance.voicetypes import VoiceInfo

MAX_FILE_BYTES = 1 << 20
MAX_ENTRIES = 10_000
MAX_PHRASE_CHARS = 200
_LANGUAGE_KEY = re.compile(r"[a-z]{2,3}(?:[_-][A-Za-z0-9]{2,8})*\Z")
_WORD_CHAR = r"[\w'’]"


class LexiconError(ValueError):
    """The lexicon file cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Entry:
    phrase: str
    ipa: str | None = None
    say: str | None = None


def _family(language: str) -> str:
    return language.replace("-", "_").split("_", 1)[0].lower()


def _norm_language(language: str) -> str:
    return language.replace("-", "_")


class LanguageLexicon:
    """The entries that apply to one voice language, compiled into one pattern."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries: dict[str, Entry] = {}
        for e in entries:
            self.entries[_key(e.phrase)] = e
        phrases = sorted(self.entries, key=len, reverse=True)  # longest phrase wins
        body = "|".join(r"\s+".join(map(re.escape, p.split())) for p in phrases)
        self.pattern = re.compile(rf"(?<!{_WORD_CHAR})(?:{body})(?!{_WORD_CHAR})", re.IGNORECASE)

    def lookup(self, phrase: str) -> Entry | None:
        return self.entries.get(_key(phrase))

    def respell(self, text: MappedText, protected: Sequence[tuple[int, int]] = ()) -> MappedText:
        """Respelling entries applied to ``text``; ``protected``: source ranges left alone."""

        def repl(m: re.Match[str]) -> str | None:
            e = self.lookup(m.group(0))
            if e is None or e.say is None:
                return None
            a, b = text.span(m.start(), m.end())
            if any(x < b and a < y for x, y in protected):
                return None
            return e.say

        return text.sub(self.pattern, repl)

    def phoneme_matches(
        self, text: str, taken: Sequence[tuple[int, int]] = ()
    ) -> list[tuple[int, int, str]]:
        """``(start, end, ipa)`` of IPA entries in ``text``, not overlapping ``taken``."""
        out: list[tuple[int, int, str]] = []
        for m in self.pattern.finditer(text):
            e = self.lookup(m.group(0))
            if e is None or e.ipa is None:
                continue
            if any(x < m.end() and m.start() < y for x, y in taken):
                continue
            out.append((m.start(), m.end(), e.ipa))
        return out


def _key(phrase: str) -> str:
    return " ".join(phrase.split()).casefold()


class Lexicon:
    """Every language's entries; :meth:`for_language` gives the compiled view a request uses."""

    def __init__(self, by_language: Mapping[str, Sequence[Entry]], source: str = "") -> None:
        self.by_language = {k: tuple(v) for k, v in by_language.items()}
        self.source = source
        self._compiled: dict[str, LanguageLexicon | None] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_language.values())

    def for_language(self, language: str) -> LanguageLexicon | None:
        lang = _norm_language(language)
        if lang not in self._compiled:
            # The family first, then the dialect's own entries over it.
            entries = [
                *self.by_language.get(_family(lang), ()),
                *(self.by_language.get(lang, ()) if lang != _family(lang) else ()),
            ]
            self._compiled[lang] = LanguageLexicon(entries) if entries else None
        return self._compiled[lang]

    def check_voices(self, voices: Iterable[tuple[str, str, Mapping[str, Sequence[int]]]]) -> None:
        """Every IPA entry against each ``(name, language, phoneme_id_map)`` it applies to."""
        for name, language, id_map in voices:
            lang = _norm_language(language)
            for key in {_family(lang), lang}:
                for e in self.by_language.get(key, ()):
                    if e.ipa is None:
                        continue
                    try:
                        ipa_symbols(e.ipa, id_map, name)
                    except ServiceError as exc:
                        raise LexiconError(
                            f"{self.source or 'lexicon'}: {key}: {e.phrase!r}: {exc.message}"
                        ) from None

    @classmethod
    def parse(cls, data: Any, source: str = "lexicon") -> Lexicon:
        if data is None:
            return cls({}, source)
        if not isinstance(data, dict):
            raise LexiconError(f"{source}: expected a mapping of language → entries")
        out: dict[str, list[Entry]] = {}
        count = 0
        for lang, entries in data.items():
            if not isinstance(lang, str) or not _LANGUAGE_KEY.match(lang):
                raise LexiconError(f"{source}: {lang!r} is not a language (en, en_US …)")
            where = f"{source}: {lang}"
            if entries is None:
                continue
            if not isinstance(entries, dict):
                raise LexiconError(f"{where}: expected a mapping of word → pronunciation")
            bucket = out.setdefault(_norm_language(lang), [])
            for phrase, value in entries.items():
                count += 1
                if count > MAX_ENTRIES:
                    raise LexiconError(f"{source}: more than {MAX_ENTRIES} entries")
                bucket.append(_entry(where, phrase, value))
        return cls(out, source)

    @classmethod
    def load(cls, path: str | Path) -> Lexicon:
        """Read and validate a lexicon file (not the symbols: see :meth:`check_voices`).

        Through the config's own reader and loader: a regular file only, opened without
        blocking (a FIFO is refused, not waited on), at most :data:`MAX_FILE_BYTES`, no
        aliases, no nesting deeper than the config's cap (5 000 levels were a RecursionError).
        """
        try:
            data = parse_yaml(read_config_text(path, MAX_FILE_BYTES), str(path))
        except ConfigError as exc:
            raise LexiconError(str(exc)) from None
        return cls.parse(data, str(path))


def max_pronunciation_chars(phrase: str) -> int:
    """The longest respelling or IPA an entry for ``phrase`` may have.

    Proportional to the phrase, so a lexicon cannot turn a short request into a long one:
    an entry "a" with a 198-character respelling made "a a a …" (40 characters) cost
    gigabytes in the encoder.  Generous for real entries ("WWW" → its 29-character IPA)."""
    return min(MAX_PHRASE_CHARS, 4 * len(phrase) + 24)


def _entry(where: str, phrase: Any, value: Any) -> Entry:
    if not isinstance(phrase, str) or not phrase.split():
        raise LexiconError(f"{where}: {phrase!r}: a word or phrase must be non-empty text")
    if len(phrase) > MAX_PHRASE_CHARS:
        raise LexiconError(f"{where}: {phrase[:20]!r}…: longer than {MAX_PHRASE_CHARS}")
    if not re.fullmatch(rf"{_WORD_CHAR}.*{_WORD_CHAR}|{_WORD_CHAR}", phrase.strip()):
        raise LexiconError(f"{where}: {phrase!r}: must start and end with a letter or digit")
    at = f"{where}: {phrase!r}"
    if isinstance(value, str):
        value = {"say": value}
    if not isinstance(value, dict) or len(value) != 1 or not set(value) <= {"ipa", "say"}:
        raise LexiconError(f"{at}: expected a respelling, {{say: TEXT}} or {{ipa: PHONEMES}}")
    ((kind, text),) = value.items()
    if not isinstance(text, str) or not text.strip():
        raise LexiconError(f"{at}: {kind} must be non-empty text")
    limit = max_pronunciation_chars(phrase.strip())
    if len(text.strip()) > limit:
        raise LexiconError(
            f"{at}: {kind} longer than {limit} characters (four times the phrase, plus 24)"
        )
    if kind == "ipa":
        return Entry(phrase.strip(), ipa=text.strip())
    if "<" in text or "[[" in text:
        raise LexiconError(f"{at}: a respelling is plain text")
    return Entry(phrase.strip(), say=" ".join(text.split()))


def load_checked(path: str | Path, voices: Iterable[VoiceInfo]) -> Lexicon:
    """Load ``path`` and check its IPA entries against ``voices`` (blocking file I/O)."""
    lexicon = Lexicon.load(path)
    lexicon.check_voices((v.name, v.language, v.phoneme_id_map) for v in voices)
    return lexicon
