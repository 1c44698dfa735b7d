"""Normalised text keeps its map to the characters the client sent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.text.normalize import normalize
from appliance.text.textmap import MappedText
from tests.text.normalize.test_en import ALL_TABLES


def norm(text: str, language: str = "en_US") -> MappedText:
    return normalize(MappedText.identity(text), language)


def span_of(out: MappedText, words: str) -> tuple[int, int]:
    i = out.text.index(words)
    return out.span(i, i + len(words))


def test_money_maps_back_to_the_written_amount() -> None:
    original = "It costs $3.50 today"
    out = norm(original)
    assert out.text == "It costs three dollars and fifty cents today"
    start, end = span_of(out, "three dollars and fifty cents")
    assert original[start:end] == "$3.50"
    assert original[slice(*span_of(out, "today"))] == "today"
    assert original[slice(*span_of(out, "It costs"))] == "It costs"


def test_abbreviation_maps_to_the_abbreviation() -> None:
    original = "Dr. Smith lives on Main St. today"
    out = norm(original)
    assert original[slice(*span_of(out, "Doctor"))] == "Dr."
    assert original[slice(*span_of(out, "Street"))] == "St."
    assert original[slice(*span_of(out, "Smith"))] == "Smith"


def test_each_part_of_a_range_maps_to_its_own_characters() -> None:
    # Three passes touch this text (range dash, unit, number); each keeps its own span.
    original = "run 5–10 km"
    out = norm(original)
    assert out.text == "run five to ten kilometers"
    assert original[slice(*span_of(out, "five"))] == "5"
    assert original[slice(*span_of(out, " to "))] == "–"
    assert original[slice(*span_of(out, "ten kilometers"))] == "10 km"


def test_date_time_and_sentence_end_map_back() -> None:
    original = "Meet on 12/05/2026 at 3:30 pm."
    out = norm(original)
    assert original[slice(*span_of(out, "December fifth, twenty twenty-six"))] == "12/05/2026"
    assert original[slice(*span_of(out, "three thirty PM"))] == "3:30 pm"
    assert out.text.endswith(".")
    assert out.span(len(out) - 1, len(out)) == (len(original) - 1, len(original))


def test_period_kept_after_an_abbreviation_maps_to_the_abbreviation() -> None:
    original = "He lives on Elm St. We visit."
    out = norm(original)
    assert out.text == "He lives on Elm Street. We visit."
    i = out.text.index("Street.")
    assert out.span(i, i + len("Street.")) == (16, 19)


def test_unchanged_text_keeps_identity_map() -> None:
    original = "Hello, how are you?"
    out = norm(original)
    assert out == MappedText.identity(original)


_TOKENS = [w for t in ALL_TABLES for w, _ in t] + ["and", "then", ".", ",", "Hello"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=6))
def test_map_is_ordered_and_within_the_original(tokens: list[str]) -> None:
    original = " ".join(tokens)
    out = norm(original)
    assert len(out.starts) == len(out.text) == len(out.ends)
    assert all(0 <= s < e <= len(original) for s, e in zip(out.starts, out.ends, strict=True))
    # Rewrites replace matches in place, so the map never goes backwards.
    assert list(out.starts) == sorted(out.starts)
