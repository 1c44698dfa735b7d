"""German and Spanish: numbers, dates, times, money and units read out (num2words' words)."""

from __future__ import annotations

import pytest

from appliance.text.normalize import normalize
from appliance.text.textmap import MappedText


def _de(text: str) -> str:
    return normalize(MappedText.identity(text), "de_DE").text


def _es(text: str) -> str:
    return normalize(MappedText.identity(text), "es_ES").text


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("3,50 €", "drei Euro fünfzig Cent"),
        ("€ 12", "zwölf Euro"),
        ("1 €", "ein Euro"),
        ("21.03.2026", "einundzwanzigster März zweitausendsechsundzwanzig"),
        ("am 1.5.", "am ersten Mai"),
        ("der 3.10.1990", "der dritte Oktober neunzehnhundertneunzig"),
        ("2026-03-21", "einundzwanzigster März zweitausendsechsundzwanzig"),
        ("14:30 Uhr", "vierzehn Uhr dreißig"),
        ("um 1:00", "um ein Uhr"),
        ("1.234.567", "eine Million zweihundertvierunddreißigtausendfünfhundertsiebenundsechzig"),
        ("3,14", "drei Komma eins vier"),
        ("-4", "minus vier"),
        ("50 %", "fünfzig Prozent"),
        ("1 km", "ein Kilometer"),
        ("100 km/h", "einhundert Kilometer pro Stunde"),
        ("20 °C", "zwanzig Grad Celsius"),
        ("2,5 kg", "zwei Komma fünf Kilogramm"),
        ("Haus 7b", "Haus 7b"),  # not a number on its own
    ],
)
def test_german(written: str, spoken: str) -> None:
    assert _de(written) == spoken


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("3,50 €", "tres euros con cincuenta céntimos"),
        ("1 €", "un euro"),
        ("12 USD", "doce dólares"),
        ("21/03/2026", "veintiuno de marzo de dos mil veintiséis"),
        ("el 1.5.2024", "el primero de mayo de dos mil veinticuatro"),
        ("14:30", "catorce y treinta"),
        ("1:05", "una y cinco"),
        ("1.234", "mil doscientos treinta y cuatro"),
        ("3,5", "tres coma cinco"),
        ("3,05", "tres coma cero cinco"),
        ("-2", "menos dos"),
        ("25 %", "veinticinco por ciento"),
        ("1 km", "un kilómetro"),
        ("5 km", "cinco kilómetros"),
        ("el 2º", "el segundo"),
        ("la 3ª", "la tercera"),
        ("la 3a", "la tercera"),  # as the frontend's NFKC hands it over
        ("el 1o", "el primero"),
    ],
)
def test_spanish(written: str, spoken: str) -> None:
    assert _es(written) == spoken


def test_a_huge_number_is_read_digit_by_digit() -> None:
    out = _de("1" * 40)
    assert out == " ".join(["eins"] * 40)


def test_spans_point_back_at_the_written_form() -> None:
    text = MappedText.identity("Preis: 3,50 €.")
    out = normalize(text, "de_DE")
    start = out.text.index("drei")
    assert out.span(start, len(out.text) - 1) == (7, 13)


@pytest.mark.parametrize("language", ["de_DE", "es_ES"])
@pytest.mark.parametrize("unit", ["1.1.", "1,1,", "12:3", "1 € ", "-1-", "2026-1-1 ", "am 1.1. "])
def test_hostile_runs_are_linear(language: str, unit: str) -> None:
    import time

    text = MappedText.identity(unit * (20000 // len(unit)))
    t0 = time.monotonic()
    normalize(text, language)
    assert time.monotonic() - t0 < 10.0  # generous: linear work is ~0.1 s here
