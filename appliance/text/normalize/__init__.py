"""Written forms → spoken forms, per language, keeping the map to the original text.

Each language is one module with ``normalize(text, language) -> MappedText``; the registry
below maps the language prefix of a voice (``en`` of ``en_US``) to it. Adding a language is
adding a module and one line here. Languages without rules pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.text.normalize import de, en, es
from appliance.text.textmap import MappedText

LanguageNormalizer = Callable[[MappedText, str], MappedText]
SayAs = Callable[[str, str, str | None, str], str | None]

_LANGUAGES: dict[str, LanguageNormalizer] = {
    "en": en.normalize,
    "de": de.normalize,
    "es": es.normalize,
}
_SAY_AS: dict[str, SayAs] = {
    "en": en.say_as,
}


def supported_languages() -> tuple[str, ...]:
    """Language prefixes that have normalisation rules."""
    return tuple(sorted(_LANGUAGES))


def normalize(text: MappedText, language: str) -> MappedText:
    """Expand numbers, dates, units … for ``language`` (a voice language such as ``en_US``).

    Languages without rules pass through unchanged.
    """
    rules = _LANGUAGES.get(family(language))
    return text if rules is None else rules(text, language)


def family(language: str) -> str:
    """The registry's key for a voice language: ``de`` of ``de_DE`` or ``de-AT``."""
    return language.replace("-", "_").split("_", 1)[0].lower()


def say_as(text: MappedText, kind: str, fmt: str | None, language: str) -> MappedText:
    """SSML ``<say-as interpret-as=kind format=fmt>``: the language's own rules for that reading.

    Text that does not fit the reading (``cardinal`` of "abc"), a reading the language has
    no rule for, or a language without rules: the text is normalised as usual.  The spoken
    form maps to the whole span of ``text``.
    """
    rule = _SAY_AS.get(family(language))
    spoken = rule(kind, text.text, fmt, language) if rule is not None else None
    if spoken is None:
        return normalize(text, language)
    if not text.text:
        return text
    return MappedText(
        spoken,
        (text.span(0, len(text))[0],) * len(spoken),
        (text.span(0, len(text))[1],) * len(spoken),
    )
