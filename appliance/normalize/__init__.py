"""Written forms → spoken forms, per language, keeping the map to the original text.

Each language is one module with ``normalize(text, language) -> MappedText``; the registry
below maps the language prefix of a voice (``en`` of ``en_US``) to it. Adding a language is
adding a module and one line here. Languages without rules pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.normalize import en
from appliance.textmap import MappedText

LanguageNormalizer = Callable[[MappedText, str], MappedText]

_LANGUAGES: dict[str, LanguageNormalizer] = {
    "en": en.normalize,
}


def supported_languages() -> tuple[str, ...]:
    """Language prefixes that have normalisation rules."""
    return tuple(sorted(_LANGUAGES))


def normalize(text: MappedText, language: str) -> MappedText:
    """Expand numbers, dates, units … for ``language`` (a voice language such as ``en_US``).

    Languages without rules pass through unchanged.
    """
    rules = _LANGUAGES.get(language.replace("-", "_").split("_", 1)[0].lower())
    return text if rules is None else rules(text, language)
