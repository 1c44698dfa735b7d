"""Numbers, dates, times, money and units for languages that write ``1.234,5`` (German,
Spanish …), spoken through ``num2words``; each language is a :class:`Words` table.

The rules, in order (each sees only what the earlier ones left): dates ``21.03.2026``
(and ``21/03/2026``, ISO ``2026-03-21``), times ``14:30`` (with ``Uhr``/``h`` after them,
or none), money (``3,50 €``, ``€ 3,50``, ``12 EUR``, ``$5``), percentages, units after a
number (``5 km``, ``20 °C``, ``100 km/h``), ordinals the language marks (``1º``), then plain
numbers (``1.234.567``, ``3,5``, ``-4``).  Decimals are read digit by digit after the
comma word unless the language says otherwise.  Pure functions over a table; a match with
more than :data:`MAX_DIGITS` digits is read as digits, one by one, so no text makes
``num2words`` work on a huge number.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from appliance.text.normalize.rules import Rule, apply_rules
from appliance.text.textmap import MappedText

MAX_DIGITS = 15
"""Longer digit runs are read digit by digit (phone numbers, IDs), never as one number."""

_INT = r"\d{1,3}(?:\.\d{3})+|\d+"
_NUM = rf"(?:{_INT})(?:,\d+)?"
_SIGN = r"(?:(?<![\w.,-])(?P<sign>[-−]))?"
"""A minus sign that is not a hyphen (nothing written right before it)."""
_DATE = r"(?<![\w.,])(?P<d>\d{1,2})([./])(?P<m>\d{1,2})\3(?P<y>\d{4})?(?![\w]|[.,]\d)"
_ISO_DATE = r"(?<![\w.,-])(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})(?![\w]|-\d)"
_TIME = re.compile(r"(?<![\w.,:])(?P<h>\d{1,2}):(?P<mi>\d{2})(?:\s?(?:Uhr|h)\b)?(?![\w:]|[.,]\d)")


@dataclass(frozen=True)
class Words:
    """What one language says: num2words' code and the words around the numbers."""

    lang: str
    months: tuple[str, ...]
    comma: str
    minus: str
    percent: str
    currencies: dict[str, tuple[str, str, str, str]]
    """Symbol or code → (unit singular, plural, cent singular, plural)."""
    units: dict[str, tuple[str, str]]
    """Unit as written → (singular, plural)."""
    one: str
    """"1" before a noun ("ein", "un")."""
    time: Callable[[int, int], str]
    date: Callable[[Words, int, int, int | None, str], str]
    """(words, day, month, year or None, the word before) → spoken date."""
    ordinal: Callable[[int, str], str] | None = None
    """(number, marker as written: º ª) → spoken ordinal, for languages that mark them."""
    digits_after_comma: bool = True
    money_joiner: str = " "


def cardinal(w: Words, n: int) -> str:
    from num2words import num2words

    if n < 0:
        return f"{w.minus} {cardinal(w, -n)}"
    if len(str(n)) > MAX_DIGITS:
        return " ".join(cardinal(w, int(d)) for d in str(n))
    return str(num2words(n, lang=w.lang))


def ordinal_word(w: Words, n: int) -> str:
    from num2words import num2words

    return str(num2words(n, lang=w.lang, to="ordinal"))


def year_word(w: Words, n: int) -> str:
    from num2words import num2words

    return str(num2words(n, lang=w.lang, to="year"))


def _int(text: str) -> int:
    return int(text.replace(".", ""))


def decimal(w: Words, written: str) -> str:
    """``3,50`` → the integer part, the comma word, then the decimals."""
    whole, _, frac = written.partition(",")
    spoken = cardinal(w, _int(whole)) if len(whole.replace(".", "")) <= MAX_DIGITS else None
    if spoken is None:
        spoken = " ".join(cardinal(w, int(d)) for d in whole if d.isdigit())
    if not frac:
        return spoken
    if w.digits_after_comma or frac.startswith("0") or len(frac) > 2:
        after = " ".join(cardinal(w, int(d)) for d in frac)
    else:
        after = cardinal(w, int(frac))
    return f"{spoken} {w.comma} {after}"


def _counted(w: Words, written: str, singular: str, plural: str) -> str:
    if written in ("1", "01"):
        return f"{w.one} {singular}"
    return f"{decimal(w, written)} {plural}"


def _rules(w: Words) -> list[Rule]:
    cur = "|".join(sorted((re.escape(c) for c in w.currencies), key=len, reverse=True))
    units = "|".join(sorted((re.escape(u) for u in w.units), key=len, reverse=True))
    # The word before a date, from its start: tried inside a word too, "\w+" read the rest of
    # it each time (a 16 000-letter word cost 8 s in one search).
    prev = r"(?:(?<!\w)(?P<prev>\w+)\s+)?"

    def date(m: re.Match[str]) -> str | None:
        day, month = int(m["d"]), int(m["m"])
        if not (1 <= day <= 31 and 1 <= month <= 12):
            return None
        year = int(m["y"]) if m["y"] else None
        before = f"{m['prev']} " if m["prev"] else ""
        return before + w.date(w, day, month, year, (m["prev"] or "").lower())

    def iso(m: re.Match[str]) -> str | None:
        day, month = int(m["d"]), int(m["m"])
        if not (1 <= day <= 31 and 1 <= month <= 12):
            return None
        before = f"{m['prev']} " if m["prev"] else ""
        return before + w.date(w, day, month, int(m["y"]), (m["prev"] or "").lower())

    def clock(m: re.Match[str]) -> str | None:
        h, mi = int(m["h"]), int(m["mi"])
        return w.time(h, mi) if h <= 24 and mi <= 59 else None

    def money(m: re.Match[str]) -> str:
        one, many, cent, cents = w.currencies[m["c1"] or m["c2"]]
        whole, _, frac = (m["n"] or m["n2"]).partition(",")
        spoken = _counted(w, whole, one, many)
        if frac and frac.strip("0"):
            c = int(frac[:2].ljust(2, "0"))
            small = f"{w.one} {cent}" if c == 1 else f"{cardinal(w, c)} {cents}"
            spoken += w.money_joiner + small
        return spoken

    def percent(m: re.Match[str]) -> str:
        sign = f"{w.minus} " if m["sign"] else ""
        return f"{sign}{decimal(w, m['n'])} {w.percent}"

    def unit(m: re.Match[str]) -> str:
        sign = f"{w.minus} " if m["sign"] else ""
        return sign + _counted(w, m["n"], *w.units[m["u"]])

    def number(m: re.Match[str]) -> str:
        sign = f"{w.minus} " if m["sign"] else ""
        return sign + decimal(w, m["n"])

    rules: list[Rule] = [
        (re.compile(prev + _DATE), date),
        (re.compile(prev + _ISO_DATE), iso),
        (_TIME, clock),
        (
            # An amount before its currency starts where its number does: tried inside a
            # run of digits it read the rest of the run from each (8 000 zeros: 5 s).
            re.compile(
                rf"(?:(?P<c1>{cur})\s?(?P<n>{_NUM})|(?<![\d.,])(?P<n2>{_NUM})\s?(?P<c2>{cur}))"
                r"(?![\w])"
            ),
            money,
        ),
        (re.compile(rf"(?<![\w.,]){_SIGN}(?P<n>{_NUM})\s?%"), percent),
        (re.compile(rf"(?<![\w.,]){_SIGN}(?P<n>{_NUM})\s?(?P<u>{units})(?![\w/])"), unit),
    ]
    if w.ordinal is not None:
        ordinal = w.ordinal
        rules.append(
            # The frontend's NFKC has made º and ª plain o and a by now.
            (re.compile(r"(?<![\w.,])(\d{1,4})([ºªoa])(?!\w)"), lambda m: ordinal(int(m[1]), m[2]))
        )
    rules.append((re.compile(rf"(?<![\w.,]){_SIGN}(?P<n>{_NUM})(?![\w]|[.,]\d)"), number))
    return rules


class Normalizer:
    """One language's rules, compiled once."""

    def __init__(self, words: Words) -> None:
        self.words = words
        self.rules = _rules(words)

    def normalize(self, text: MappedText) -> MappedText:
        return apply_rules(text, self.rules)
