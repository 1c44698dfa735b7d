"""English dates: written (``2027-01-05``, ``01/05/2027``, ``Jan 5th, 2027``, ``5 May``)
→ spoken, for one dialect, and SSML ``<say-as interpret-as="date">``.

American English reads ``01/05/2027`` as January fifth, the other English voices as the
first of May (day/month); a dotted date is day-first everywhere, and a date only one order
can make (13/05) is read in that order.  Pure functions of the match over
:class:`EnglishNumbers`; :mod:`.en` runs the rules in its order (after URLs and phone
numbers, before ranges and times).  A ``<say-as>`` field longer than a day, month or year
can be is no date (``int()`` is never asked for thousands of digits).
"""

from __future__ import annotations

import re

from appliance.text.normalize.en_numbers import EnglishNumbers
from appliance.text.normalize.rules import Rule, keep_period

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH_INDEX = {name: i for i, name in enumerate(MONTHS, 1)}
_MONTH_INDEX.update({name[:3]: i for i, name in enumerate(MONTHS, 1)})
_MONTH_INDEX["Sept"] = 9
_MONTH_ALT = "|".join(sorted(_MONTH_INDEX, key=len, reverse=True))
ORD_SUFFIX = r"(?:st|nd|rd|th)"
_ISO_DATE = re.compile(r"(?<![\w.-])(\d{4})-(\d{1,2})-(\d{1,2})(?![\w]|[.-]\d)")
_NUMERIC_DATE = re.compile(r"(?<![\w.,/-])(\d{1,2})([/.-])(\d{1,2})\2(\d{4}|\d{2})(?![\w/]|[.-]\d)")
_MONTH_FIRST_DATE = re.compile(
    rf"\b(?P<mon>{_MONTH_ALT})\b(?P<dot>\.)?\s+"
    rf"(?:(?P<day>\d{{1,2}}){ORD_SUFFIX}?(?!\d)(?:,?\s+(?P<year>\d{{4}})(?!\d))?"
    r"|(?P<yonly>\d{4})(?!\d))"
)
_DAY_FIRST_DATE = re.compile(
    rf"(?<![\w.,])(?P<day>\d{{1,2}}){ORD_SUFFIX}?\s+(?:of\s+)?(?P<mon>{_MONTH_ALT})\b(?P<dot>\.)?"
    r"(?:,?\s+(?P<year>\d{4})(?!\d))?"
)

# <say-as> inputs.
_DATE_FIELD = re.compile(r"\d+|[A-Za-z]+")
# The most digits a <say-as interpret-as="date"> field may have: a longer one is no date.
_FIELD_DIGITS = {"d": 2, "m": 2, "y": 9}


class EnglishDates:
    """Says dates for one English dialect; stateless after construction."""

    def __init__(self, num: EnglishNumbers, *, american: bool) -> None:
        self.num = num
        self.american = american
        self.rules: tuple[Rule, ...] = (
            (_ISO_DATE, self._iso_date),
            (_NUMERIC_DATE, self._numeric_date),
            (_MONTH_FIRST_DATE, self._month_first_date),
            (_DAY_FIRST_DATE, self._day_first_date),
        )
        """The date rules, in the order they run."""

    def say_as(self, text: str, fmt: str | None) -> str | None:
        """``<say-as interpret-as="date" format=fmt>``; None: ``text`` is no such date."""
        order = (fmt or ("mdy" if self.american else "dmy")).strip().lower()
        fields = _DATE_FIELD.findall(text)
        if not order or set(order) - set("dmy") or len(fields) != len(order):
            return None
        month = day = year = None
        for letter, value in zip(order, fields, strict=True):
            if value.isdigit() and len(value) > _FIELD_DIGITS[letter]:
                return None  # no such day, month or year (and int() refuses 4 300 digits)
            if letter == "m":
                month = int(value) if value.isdigit() else _MONTH_INDEX.get(value.title()[:3])
                month = _MONTH_INDEX.get(value.title(), month)
            elif not value.isdigit():
                return None
            elif letter == "d":
                day = int(value)
            else:
                year = int(value) + (2000 if len(value) == 2 and int(value) < 50 else 0)
                year += 1900 if len(value) == 2 and int(value) >= 50 else 0
        if month is None:
            if year is not None and day is None:
                return self.num.year(year)
            if day is not None and year is None and 1 <= day <= 31:
                return "the " + self.num.ordinal(str(day))
            return None
        return self._date(month, day, year, day_first=order.find("d") < order.find("m"))

    def _date(self, month: int, day: int | None, year: int | None, day_first: bool) -> str | None:
        if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
            return None
        name = MONTHS[month - 1]
        if day is None:
            spoken = name
        elif day_first:
            spoken = f"the {self.num.ordinal(str(day))} of {name}"
        else:
            spoken = f"{name} {self.num.ordinal(str(day))}"
        if year is not None:
            sep = "," if day is not None and not day_first else ""
            spoken += f"{sep} {self.num.year(year)}"
        return spoken

    def _iso_date(self, m: re.Match[str]) -> str | None:
        year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return self._date(month, day, year, day_first=not self.american)

    def _numeric_date(self, m: re.Match[str]) -> str | None:
        first, sep, second, y = int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)
        if sep != "/" and len(y) != 4:
            return None  # 1.2.26 is a version, 3-4-26 a chain of ranges
        year = int(y) if len(y) == 4 else (2000 + int(y) if int(y) < 50 else 1900 + int(y))
        # Dotted dates are day-first everywhere; otherwise the dialect's order, unless only
        # the other order is a valid date (13/05 can only be day/month).
        day_first = sep == "." or not self.american
        if (second if day_first else first) > 12:
            day_first = not day_first
        month, day = (second, first) if day_first else (first, second)
        return self._date(month, day, year, day_first=not self.american)

    def _month_first_date(self, m: re.Match[str]) -> str | None:
        month = _MONTH_INDEX[m.group("mon")]
        if m.group("yonly"):
            return self._date(month, None, int(m.group("yonly")), day_first=False)
        year = int(m.group("year")) if m.group("year") else None
        return self._date(month, int(m.group("day")), year, day_first=False)

    def _day_first_date(self, m: re.Match[str]) -> str | None:
        year = int(m.group("year")) if m.group("year") else None
        spoken = self._date(_MONTH_INDEX[m.group("mon")], int(m.group("day")), year, True)
        if spoken is None:
            return None
        if m.string[max(0, m.start() - 4) : m.start()].lower() == "the ":
            spoken = spoken.removeprefix("the ")  # "the 5th of May"
        if m.group("dot") and year is None:
            spoken += keep_period(m)
        return spoken
