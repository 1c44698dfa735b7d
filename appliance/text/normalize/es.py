"""Spanish: numbers, dates, times, money and units (:mod:`.continental`'s rules, Spanish words).

``21/03/2026`` is "veintiuno de marzo de dos mil veintiséis" (the first: "primero"),
``14:30`` "catorce y treinta", ``3,50 €`` "tres euros con cincuenta céntimos", ``1º``
"primero", ``2ª`` "segunda"; decimals after "coma" as a number when two digits or fewer.
"""

from __future__ import annotations

from appliance.text.normalize.continental import Normalizer, Words, cardinal, ordinal_word
from appliance.text.textmap import MappedText

_MONTHS = (
    "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre"
).split()


def _date(w: Words, day: int, month: int, year: int | None, before: str) -> str:
    spoken = ("primero" if day == 1 else cardinal(w, day)) + f" de {_MONTHS[month - 1]}"
    return spoken if year is None else f"{spoken} de {cardinal(w, year)}"


def _time(h: int, mi: int) -> str:
    hours = "una" if h == 1 else cardinal(WORDS, h)
    return hours if mi == 0 else f"{hours} y {cardinal(WORDS, mi)}"


def _ordinal(n: int, marker: str) -> str:
    spoken = ordinal_word(WORDS, n)
    if marker in "ªa":  # the feminine: each word's final o → a ("vigésima primera")
        spoken = " ".join(w[:-1] + "a" if w.endswith("o") else w for w in spoken.split())
    return spoken


WORDS = Words(
    lang="es",
    months=tuple(_MONTHS),
    comma="coma",
    minus="menos",
    percent="por ciento",
    currencies={
        "€": ("euro", "euros", "céntimo", "céntimos"),
        "EUR": ("euro", "euros", "céntimo", "céntimos"),
        "$": ("dólar", "dólares", "centavo", "centavos"),
        "USD": ("dólar", "dólares", "centavo", "centavos"),
        "£": ("libra", "libras", "penique", "peniques"),
    },
    units={
        "km/h": ("kilómetro por hora", "kilómetros por hora"),
        "km": ("kilómetro", "kilómetros"),
        "cm": ("centímetro", "centímetros"),
        "mm": ("milímetro", "milímetros"),
        "m": ("metro", "metros"),
        "kg": ("kilogramo", "kilogramos"),
        "g": ("gramo", "gramos"),
        "l": ("litro", "litros"),
        "ml": ("mililitro", "mililitros"),
        "°C": ("grado centígrado", "grados centígrados"),
        "°": ("grado", "grados"),
        "h": ("hora", "horas"),
        "min": ("minuto", "minutos"),
    },
    one="un",
    time=_time,
    date=_date,
    ordinal=_ordinal,
    digits_after_comma=False,
    money_joiner=" con ",
)
_RULES = Normalizer(WORDS)


def normalize(text: MappedText, language: str) -> MappedText:
    """Normalise Spanish ``text`` (es_ES, es_MX … read alike here)."""
    return _RULES.normalize(text)
