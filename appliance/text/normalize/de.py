"""German: numbers, dates, times, money and units (:mod:`.continental`'s rules, German words).

``21.03.2026`` is "einundzwanzigster März zweitausendsechsundzwanzig" ("-ten" after am,
vom, zum, bis, ab, seit; "-te" after der, die, das), ``14:30 Uhr`` "vierzehn Uhr dreißig",
``3,50 €`` "drei Euro fünfzig Cent", decimals digit by digit after "Komma"; years in dates
as German says them (neunzehnhundert…).
"""

from __future__ import annotations

from appliance.text.normalize.continental import (
    Normalizer,
    Words,
    cardinal,
    ordinal_word,
    year_word,
)
from appliance.text.textmap import MappedText

_MONTHS = (
    "Januar Februar März April Mai Juni Juli August September Oktober November Dezember"
).split()
_DATIVE = frozenset("am vom zum bis ab seit".split())
_ARTICLE = frozenset("der die das".split())


def _date(w: Words, day: int, month: int, year: int | None, before: str) -> str:
    ending = "n" if before in _DATIVE else "" if before in _ARTICLE else "r"
    spoken = ordinal_word(w, day) + ending
    spoken += f" {_MONTHS[month - 1]}"
    return spoken if year is None else f"{spoken} {year_word(w, year)}"


def _time(h: int, mi: int) -> str:
    hours = "ein" if h == 1 else cardinal(WORDS, h)
    return f"{hours} Uhr" + (f" {cardinal(WORDS, mi)}" if mi else "")


WORDS = Words(
    lang="de",
    months=tuple(_MONTHS),
    comma="Komma",
    minus="minus",
    percent="Prozent",
    currencies={
        "€": ("Euro", "Euro", "Cent", "Cent"),
        "EUR": ("Euro", "Euro", "Cent", "Cent"),
        "$": ("Dollar", "Dollar", "Cent", "Cent"),
        "USD": ("Dollar", "Dollar", "Cent", "Cent"),
        "£": ("Pfund", "Pfund", "Penny", "Pence"),
        "CHF": ("Franken", "Franken", "Rappen", "Rappen"),
    },
    units={
        "km/h": ("Kilometer pro Stunde", "Kilometer pro Stunde"),
        "km": ("Kilometer", "Kilometer"),
        "cm": ("Zentimeter", "Zentimeter"),
        "mm": ("Millimeter", "Millimeter"),
        "m": ("Meter", "Meter"),
        "kg": ("Kilogramm", "Kilogramm"),
        "g": ("Gramm", "Gramm"),
        "l": ("Liter", "Liter"),
        "ml": ("Milliliter", "Milliliter"),
        "°C": ("Grad Celsius", "Grad Celsius"),
        "°": ("Grad", "Grad"),
        "kWh": ("Kilowattstunde", "Kilowattstunden"),
        "h": ("Stunde", "Stunden"),
        "min": ("Minute", "Minuten"),
    },
    one="ein",
    time=_time,
    date=_date,
)
_RULES = Normalizer(WORDS)


def normalize(text: MappedText, language: str) -> MappedText:
    """Normalise German ``text`` (de_DE, de_AT, de_CH read alike here)."""
    return _RULES.normalize(text)
