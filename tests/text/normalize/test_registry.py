"""Language dispatch: English, German and Spanish rules by prefix; the rest passes through."""

from __future__ import annotations

import pytest

from appliance.text.normalize import normalize, supported_languages
from appliance.text.textmap import MappedText


@pytest.mark.parametrize("language", ["fr_FR", "zh_CN", "nl_NL", ""])
def test_languages_without_rules_pass_through_unchanged(language: str) -> None:
    text = MappedText.identity("Es kostet 3,50 € am 12.05.2026, Dr. Müller.")
    assert normalize(text, language) is text


@pytest.mark.parametrize("language", ["en_US", "en_GB", "en", "en-US", "EN_us"])
def test_english_voices_get_english_rules(language: str) -> None:
    out = normalize(MappedText.identity("I have 3 cats."), language)
    assert out.text == "I have three cats."


def test_supported_languages_are_english_german_and_spanish() -> None:
    assert supported_languages() == ("de", "en", "es")


@pytest.mark.parametrize("language", ["de_DE", "de_AT", "de-CH", "es_ES", "es_MX", "es"])
def test_german_and_spanish_voices_get_their_rules(language: str) -> None:
    text = MappedText.identity("3,50 €")
    assert normalize(text, language).text != text.text


def test_input_map_is_respected() -> None:
    # The frontend hands over text already rewritten (NFKC …); spans go to *its* original.
    text = MappedText("$5", (10, 11), (11, 12))
    out = normalize(text, "en_US")
    assert out.text == "five dollars"
    assert out.span(0, len(out)) == (10, 12)
