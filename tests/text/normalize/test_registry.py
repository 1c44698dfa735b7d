"""Language dispatch: English rules for en_*, everything else passes through."""

from __future__ import annotations

import pytest

from appliance.text.normalize import normalize, supported_languages
from appliance.text.textmap import MappedText


@pytest.mark.parametrize("language", ["de_DE", "fr_FR", "zh_CN", "es_ES", ""])
def test_languages_without_rules_pass_through_unchanged(language: str) -> None:
    text = MappedText.identity("Es kostet 3,50 € am 12.05.2026, Dr. Müller.")
    assert normalize(text, language) is text


@pytest.mark.parametrize("language", ["en_US", "en_GB", "en", "en-US", "EN_us"])
def test_english_voices_get_english_rules(language: str) -> None:
    out = normalize(MappedText.identity("I have 3 cats."), language)
    assert out.text == "I have three cats."


def test_supported_languages_lists_english() -> None:
    assert "en" in supported_languages()


def test_input_map_is_respected() -> None:
    # The frontend hands over text already rewritten (NFKC …); spans go to *its* original.
    text = MappedText("$5", (10, 11), (11, 12))
    out = normalize(text, "en_US")
    assert out.text == "five dollars"
    assert out.span(0, len(out)) == (10, 12)
