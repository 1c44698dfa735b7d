"""Any text normalises without error, in time linear in its length."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.text.normalize import normalize, say_as
from appliance.text.normalize.en_numbers import EnglishNumbers
from appliance.text.ssml import SAY_AS_KINDS
from appliance.text.textmap import MappedText

_PIECES = [
    *"0123456789 .,:;-–—/$€£¥¢%‰°CFkmgsMBhxX×=+−^#&@'’()apmAPMStDrNov",
    *["Jan", "May", " in ", "St.", "Dr.", "a.m.", "www.", ".com", "e.g.", "km", "th", "nd", "v"],
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(_PIECES), max_size=25).map("".join),
    st.sampled_from(["en_US", "en_GB"]),
)
def test_any_mix_of_digits_and_symbols_normalises(text: str, language: str) -> None:
    out = normalize(MappedText.identity(text), language)
    assert list(out.starts) == sorted(out.starts)
    assert all(e <= len(text) for e in out.ends)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text",
    [
        "a" * 5000,
        "ab-" * 2000,
        "1" * 5000,
        "1." * 2500,
        "1," * 2500,
        "1-" * 2500,
        "$1 " * 1500,
        "abc." * 1500,
        "a.b-c_d" * 800,
        "St. John " * 600,
        "9" * 5000 + "th",
        "$" + "9" * 5000 + ".99",
    ],
    ids=lambda t: t[:12],
)
def test_long_pathological_input_is_handled(text: str) -> None:
    # A regex with nested quantifiers took minutes on "ab-" * 2000; the timeout catches that.
    out = normalize(MappedText.identity(text), "en_US")
    assert out.text


_HUGE = ["9" * 400, "9" * 5000, "0" * 4400 + "1", "1/2/" + "9" * 400, "9" * 400 + " 1", "31"]


@pytest.mark.parametrize("kind", sorted(SAY_AS_KINDS))
@pytest.mark.parametrize("fmt", [None, "y", "d", "m", "dmy", "mdy", "ym", "md"])
@pytest.mark.parametrize("text", _HUGE, ids=lambda t: f"{len(t)}chars")
def test_say_as_of_huge_numbers_reads_or_declines(kind: str, fmt: str | None, text: str) -> None:
    # A 400-digit year overflowed num2words; 5 000 digits passed int()'s 4 300-digit limit.
    for language in ("en_US", "en_GB"):
        out = say_as(MappedText.identity(text), kind, fmt, language)
        assert out.text


def test_huge_years_are_read_digit_by_digit() -> None:
    numbers = EnglishNumbers(american=True)
    assert numbers.year(2027) == "twenty twenty-seven"
    assert numbers.year(10**400).startswith("one zero zero")


_NUMBERY = ["9" * 400, "9" * 4400, "0" * 20, "1", "31", "13", "/", "-", ".", ",", " ", "Jan"]
_NUMBERY += ["pm", ":", "+", "٣" * 20, "st", "%", "$", "x", "½"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(_NUMBERY), min_size=1, max_size=6).map("".join),
    st.sampled_from([*sorted(SAY_AS_KINDS), "unknown"]),
    st.sampled_from([None, "mdy", "dmy", "ymd", "y", "d", "md", "ym", "dd", ""]),
)
def test_say_as_and_normalize_never_raise(text: str, kind: str, fmt: str | None) -> None:
    for language in ("en_US", "en_GB"):
        say_as(MappedText.identity(text), kind, fmt, language)
        normalize(MappedText.identity(text), language)
