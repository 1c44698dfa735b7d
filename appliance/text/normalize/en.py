"""English: written forms → what a speaker says (numbers, dates, money, units, abbreviations …).

One regex pass per category, in an order where each pass only sees digits and symbols the
earlier ones left alone: URLs and phone numbers first (they contain dots, dashes and digit
groups that would otherwise look like decimals, dates and ranges), then dates, ranges, times,
abbreviations, money, percentages, units, ordinals, versions, fractions, math signs, and finally
plain numbers. Outputs are plain words and ordinary punctuation; a period is kept only where it
ends a sentence, so the sentence splitter never sees a decimal point or "Dr." again.

American English (``en_US``, plain ``en``) reads 01/05/2027 as January fifth and drops the
"and" after hundred; the other English voices read day/month and spell "kilometre", "litre".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.text.normalize.en_dates import MONTHS, ORD_SUFFIX, EnglishDates
from appliance.text.normalize.en_numbers import EnglishNumbers, pluralize_number_words
from appliance.text.normalize.rules import Rule, apply_rules, keep_period
from appliance.text.textmap import MappedText

# A written number: thousands-grouped or plain digits, optional decimals.
_NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"

# --- URLs, e-mail -------------------------------------------------------------------------------
_TLDS = "com|org|net|edu|gov|io|dev|ai|app|info|co|uk|de|us|eu|biz"
_URL_TAIL = r"(?:[/?#][^\s<>\"]*[^\s<>\".,;:!?)\]'’])?"
# Matches start only where a run of name characters starts, and the name parts are possessive,
# so a long word or hyphen chain costs linear time, not quadratic or worse.
_URL = re.compile(
    r"(?<![\w@.%+-])(?:"
    r"[A-Za-z0-9._%+-]++@[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)+"  # e-mail
    r"|(?:https?://|www\.)[^\s<>\"]*[^\s<>\".,;:!?)\]'’]"  # explicit URL
    rf"|(?=[\w-]*[A-Za-z])(?:[A-Za-z0-9-]++\.)+(?:{_TLDS})\b{_URL_TAIL}"  # bare domain
    r")"
)
_URL_SCHEME = re.compile(r"^https?://")
_URL_TOKEN = re.compile(r"[A-Za-z]+|\d+|.")
_URL_SYMBOLS = {
    ".": "dot",
    "/": "slash",
    "@": "at",
    "-": "dash",
    "_": "underscore",
    ":": "colon",
    "?": "question mark",
    "=": "equals",
    "&": "and",
    "#": "hash",
    "~": "tilde",
    "+": "plus",
    "%": "percent",
}
# Two-letter URL parts said as words rather than spelled out.
_SHORT_WORDS = frozenset(
    "co me go my to in on is it at by we no so do up an be he hi oh ok or of".split()
)

# --- phone numbers ------------------------------------------------------------------------------
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+\d{1,3}(?:[ .-]\(?\d{1,4}\)?){2,5}"  # +44 20 7946 0958, +1 (555) 123-4567
    r"|(?:1[ .-])?(?:\(\d{3}\) ?|\d{3}[.-])\d{3}[.-]\d{4}"  # (555) 123-4567, 1-800-555-0199
    r"|\d{3}-\d{4}"  # 555-0199
    r")(?![\w-]|\.\d)"
)
_DIGIT_GROUP = re.compile(r"\d+")

# --- ranges -------------------------------------------------------------------------------------
_YEAR_RANGE = re.compile(
    r"(?<![\w.,-])(1[1-9]\d\d|20\d\d)\s?[–—-]\s?(1[1-9]\d\d|20\d\d|\d\d)(?![\w]|[.,-]\d)"
)
_DASH_RANGE = re.compile(
    r"(?:(?<=\d)|(?<=[\d\s][AaPp][Mm])|(?<=[\d\s][AaPp]\.[Mm]\.))"
    r"(?:\s?[–—]\s?|-)(?=[-−]?[$€£¥₹]?\d)"
)

# --- times --------------------------------------------------------------------------------------
# "a.m." owns its last period (kept if it also ends the sentence); "am." does not.
_AMPM = r"(?P<ap>[AaPp])(?:(?P<dot>\.\s?[Mm]\.)|\.?\s?[Mm](?![A-Za-z]))"
_TIME = re.compile(
    r"(?<![\w.:])(?P<h>\d{1,2})(?=:\d\d|\s?[AaPp]\.?\s?[Mm](?![A-Za-z]))"
    rf"(?::(?P<m>\d\d)(?::(?P<s>\d\d))?(?!\d))?(?:\s?{_AMPM})?"
)

# --- abbreviations ------------------------------------------------------------------------------
# kind: "title" precedes a name and never ends a sentence; "final" may end one (keep the period
# then); "inline" never does; "place" is St./Dr. (Street/Saint, Drive/Doctor by context);
# "number" is No. before a number.
_ABBREVIATIONS: dict[str, tuple[str, str]] = {
    "Mr.": ("Mister", "title"),
    "Mrs.": ("Missus", "title"),
    "Ms.": ("Miz", "title"),
    "Prof.": ("Professor", "title"),
    "Rev.": ("Reverend", "title"),
    "Gen.": ("General", "title"),
    "Capt.": ("Captain", "title"),
    "Sgt.": ("Sergeant", "title"),
    "Lt.": ("Lieutenant", "title"),
    "Gov.": ("Governor", "title"),
    "Sen.": ("Senator", "title"),
    "Rep.": ("Representative", "title"),
    "Mt.": ("Mount", "title"),
    "Ft.": ("Fort", "title"),
    "Mr": ("Mister", "title"),
    "Mrs": ("Missus", "title"),
    "Ms": ("Miz", "title"),
    "Prof": ("Professor", "title"),
    "St.": ("Street|Saint", "place"),
    "St": ("Street|Saint", "place"),
    "Dr.": ("Drive|Doctor", "place"),
    "Dr": ("Drive|Doctor", "place"),
    "Ave.": ("Avenue", "final"),
    "Rd.": ("Road", "final"),
    "Blvd.": ("Boulevard", "final"),
    "Ln.": ("Lane", "final"),
    "Jr.": ("Junior", "final"),
    "Sr.": ("Senior", "final"),
    "Inc.": ("Incorporated", "final"),
    "Ltd.": ("Limited", "final"),
    "Co.": ("Company", "final"),
    "Corp.": ("Corporation", "final"),
    "Dept.": ("Department", "final"),
    "dept.": ("department", "final"),
    "etc.": ("et cetera", "final"),
    "approx.": ("approximately", "inline"),
    "e.g.": ("for example", "inline"),
    "i.e.": ("that is", "inline"),
    "a.k.a.": ("also known as", "inline"),
    "cf.": ("compare", "inline"),
    "vs.": ("versus", "inline"),
    "vs": ("versus", "inline"),
    "Fig.": ("figure", "inline"),
    "No.": ("number", "number"),
    "Nos.": ("numbers", "number"),
    "no.": ("number", "number"),
    "No": ("number", "number"),  # NFKC of "№"
}
for _name in MONTHS:
    if len(_name) > 4:
        _ABBREVIATIONS[_name[:3] + "."] = (_name, "final")
_ABBREVIATIONS["Sept."] = ("September", "final")
_ABBREVIATION = re.compile(
    r"(?<![\w.])(?:"
    + "|".join(re.escape(k) for k in sorted(_ABBREVIATIONS, key=len, reverse=True))
    + r")(?!\w)"
)
_NEXT_IS_CAPITAL = re.compile(r"\s+[\"“(]?[A-Z]")
_NEXT_IS_NUMBER = re.compile(r"\s?#?\d")
_PREV_CAPITALIZED = re.compile(r"[A-Z][A-Za-z'’-]*\s+$")

# --- money --------------------------------------------------------------------------------------
_CURRENCIES: dict[str, tuple[str, str, str | None, str | None]] = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "US$": ("US dollar", "US dollars", "cent", "cents"),
    "USD": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "EUR": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "GBP": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", None, None),
    "JPY": ("yen", "yen", None, None),
    "₹": ("rupee", "rupees", "paisa", "paise"),
    "INR": ("rupee", "rupees", "paisa", "paise"),
}
_SCALES = {
    "thousand": "thousand",
    "million": "million",
    "billion": "billion",
    "trillion": "trillion",
    "k": "thousand",
    "K": "thousand",
    "M": "million",
    "mn": "million",
    "B": "billion",
    "bn": "billion",
    "T": "trillion",
    "tn": "trillion",
}
_CURRENCY_PREFIX = re.compile(
    r"(?<![\w.])(?P<neg>[-−])?"
    r"(?P<sym>US\$|[$€£¥₹]|(?:USD|EUR|GBP|JPY|INR)(?=\s?\d))\s?"
    rf"(?P<a>{_NUM})"
    rf"(?:(?:\s?[–—]\s?|-|\s+to\s+)(?:US\$|[$€£¥₹])?(?P<b>{_NUM}))?"
    r"(?:\s?(?P<scale>thousand|million|billion|trillion)\b|(?P<abbr>bn|mn|tn|[kKMBT])(?![A-Za-z]))?"
    r"(?!\d)"
)
_CURRENCY_SUFFIX = re.compile(
    rf"(?<![\w.,])(?P<neg>[-−])?(?P<a>{_NUM})\s?(?P<sym>[€£¥₹¢]|USD|EUR|GBP|JPY|INR)(?!\w)"
)

# --- percentages, units -------------------------------------------------------------------------
_PERCENT = re.compile(rf"(?<![\w.,])(?P<sign>[-−+])?(?P<a>{_NUM})\s?(?P<pc>%|‰)")

_UNITS: dict[str, tuple[str, str]] = {
    "km": ("kilometer", "kilometers"),
    "m": ("meter", "meters"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "µm": ("micrometer", "micrometers"),
    "μm": ("micrometer", "micrometers"),
    "nm": ("nanometer", "nanometers"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "yd": ("yard", "yards"),
    "kg": ("kilogram", "kilograms"),
    "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "l": ("liter", "liters"),
    "L": ("liter", "liters"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "m/s": ("meter per second", "meters per second"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "ms": ("millisecond", "milliseconds"),
    "µs": ("microsecond", "microseconds"),
    "μs": ("microsecond", "microseconds"),
    "ns": ("nanosecond", "nanoseconds"),
    "s": ("second", "seconds"),
    "sec": ("second", "seconds"),
    "secs": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "mins": ("minute", "minutes"),
    "h": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"),
    "mAh": ("milliamp hour", "milliamp hours"),
    "dB": ("decibel", "decibels"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    "px": ("pixel", "pixels"),
}
_UNIT = re.compile(
    rf"(?<![\w.,])(?P<sign>[-−+])?(?P<a>{_NUM})\s?(?P<unit>"
    + "|".join(re.escape(k) for k in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w/°])"
)

# --- ordinals, decades, versions, fractions -----------------------------------------------------
_ORDINAL = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th|ST|ND|RD|TH)(?!\w)")
_DECADE = re.compile(
    r"(?<![\w.,'’])(?P<year>(?:1\d|20)\d0)['’]?s(?!\w)"
    r"|['’](?P<short>[1-9]0)s(?!\w)"
    r"|(?<![\w.,'’])(?P<bare>[2-9]0)['’]?s(?!\w)"
)
_VERSION = re.compile(
    r"(?<![\w.])(?:"
    r"(?P<cue>[vV]|(?:[Vv]ersion|[Rr]elease|Python|iOS|Android|Ubuntu|Linux)\s+)(?=\d)"
    r"(?P<cued>\d+(?:\.\d+)*)"
    r"|(?P<nums>\d+(?:\.\d+){2,})"
    r")(?!\w|\.\d)"
)
# NFKC turns "½" into "1⁄2" with U+2044 FRACTION SLASH.
_FRACTION = re.compile(r"(?<![\w/.,])(\d{1,9})[/⁄](\d{1,9})(?![\w/]|[.,]\d)")
_FRACTION_SPECIAL = {"24/7": "twenty-four seven", "9/11": "nine eleven", "50/50": "fifty fifty"}

# --- math signs and symbols ---------------------------------------------------------------------
# The spaces before a sign are taken from their start: tried from each space of a run, "\s*"
# read the rest of it every time.
_MATH = re.compile(
    r"(?:(?<!\s)\s+)?(?P<op>[×÷±=≠≈≤≥−+^&@])\s*"
    r"|(?<=\d)(?P<times>\s*[xX*]\s*)(?=\d)"
    r"|(?<=\d)(?P<fold>[xX])(?=[\s,.;:!?]|$)"
    r"|(?<=\d)\s+-\s+(?=[-−]?[\d(])"
    r"|(?<=\d)\s*(?P<cmp>[<>])\s*(?=[-−]?\d)"
    r"|(?<=\d)(?P<ratio>:)(?=\d)"
    r"|(?<![\w&])(?P<hash>#)(?=\d)"
)
_OPERATORS = {
    "×": " times ",
    "÷": " divided by ",
    "±": " plus or minus ",
    "=": " equals ",
    "≠": " is not equal to ",
    "≈": " is approximately ",
    "≤": " is less than or equal to ",
    "≥": " is greater than or equal to ",
    "−": " minus ",
    "+": " plus ",
    "^": " to the power of ",
    "&": " and ",
    "@": " at ",
    "<": " is less than ",
    ">": " is greater than ",
}

# --- plain numbers and years --------------------------------------------------------------------
_NUMBER = re.compile(
    r"(?:(?<![\w.,])(?P<sign>[-−+]))?(?<![\d.])"
    r"(?:(?P<a>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<f>\d+))?|(?<!\w)\.(?P<f2>\d+))(?!\d)"
)
_PREV_WORD = re.compile(r"([A-Za-z]+)[^\w]*$")
_NEXT_WORD = re.compile(r"[ \t]+([a-z][a-z'’]*)")
# Words before a 4-digit number that make it a year whatever follows ("in 1999 people …").
_YEAR_CUES = frozenset(
    "in since until till from during year circa ca c born died founded established before after "
    "by spring summer autumn fall winter early late mid".split()
)
_EARLY_YEAR_CUES = frozenset("in since year circa ca c".split())
# Words before a 4-digit number that make it a quantity.
_COUNT_CUES = frozenset(
    "about over under than nearly almost only exactly some approximately roughly total just "
    "least most all another additional extra".split()
)
# Lower-case words that may follow a year; any other lower-case word makes it a quantity
# ("1999 people", "2000 cars") — a noun right after a number is counted by it.
_AFTER_YEAR = frozenset(
    "was is were will would saw had has and or but when while to through until with the a an "
    "in on at for as during after before season election elections edition model census "
    "olympics budget version release onwards onward we they he she it i you there that this "
    "became brought marked proved".split()
)

_SPACES = re.compile(r"\s{2,}|^\s+|\s+$|\s+(?=[,.;:!?])")

# <say-as> inputs.
_SAY_AS_NUMBER = re.compile(rf"[-−+]?{_NUM}")
_SAY_AS_ORDINAL = re.compile(rf"(\d{{1,3}}(?:,\d{{3}})+|\d+)(?:{ORD_SUFFIX}|\.)?", re.IGNORECASE)


@dataclass(frozen=True)
class _Dialect:
    american: bool

    def spell(self, words: str) -> str:
        if self.american:
            return words
        return words.replace("meter", "metre").replace("liter", "litre")


class EnglishNormalizer:
    """Rewrites written English into spoken English for one dialect."""

    def __init__(self, *, american: bool) -> None:
        self.dialect = _Dialect(american)
        self.num = EnglishNumbers(american=american)
        self.dates = EnglishDates(self.num, american=american)
        self._text_rules: list[Rule] = [
            (_URL, self._url),
            (_ABBREVIATION, self._abbreviation),
            (_MATH, self._math),
        ]
        # Rules that only apply where the text has a digit.
        self._number_rules: list[Rule] = [
            (_URL, self._url),
            (_PHONE, self._phone),
            *self.dates.rules,
            (_YEAR_RANGE, self._year_range),
            (_DASH_RANGE, lambda m: " to "),
            (_TIME, self._time),
            (_ABBREVIATION, self._abbreviation),
            (_CURRENCY_PREFIX, self._currency),
            (_CURRENCY_SUFFIX, self._currency),
            (_PERCENT, self._percent),
            (_UNIT, self._unit),
            (_ORDINAL, lambda m: self.num.ordinal(m.group(1))),
            (_DECADE, self._decade),
            (_VERSION, self._version),
            (_FRACTION, self._fraction),
            (_MATH, self._math),
            (_NUMBER, self._number),
        ]

    def normalize(self, text: MappedText) -> MappedText:
        has_digit = any(c.isdigit() for c in text.text)
        text = apply_rules(text, self._number_rules if has_digit else self._text_rules)
        return apply_rules(text, [(_SPACES, _space)])

    # --- URLs, phone numbers ------------------------------------------------------------------

    def _url(self, m: re.Match[str]) -> str:
        words: list[str] = []
        for token in _URL_TOKEN.findall(_URL_SCHEME.sub("", m.group(0)).rstrip("/")):
            if token.isalpha():
                low = token.lower()
                spell = (len(low) <= 2 and low not in _SHORT_WORDS) or not any(
                    v in low for v in "aeiou"
                )
                words.append(" ".join(low) if spell else token)
            else:
                words.append(self._spell_token(token))
        return " ".join(w for w in words if w)

    def _spell_token(self, token: str) -> str:
        """A non-letter token as a URL reads it: digits one by one, symbols by name."""
        if token.isdigit():
            return self.num.digits(token)
        return _URL_SYMBOLS.get(token, "")

    def spell_out(self, text: str) -> str:
        """Every letter, digit and symbol on its own, as a URL spells an acronym ('b b c')."""
        words: list[str] = []
        for token in _URL_TOKEN.findall(text):
            if token.isalpha():
                # A lone "a" between letters is read as the article (schwa); "eh" is
                # the letter's name to espeak.
                words.extend("eh" if c == "a" else c for c in token.lower())
            elif not token.isspace():
                words.append(self._spell_token(token))
        return " ".join(w for w in words if w)

    def _phone(self, m: re.Match[str]) -> str:
        return self.telephone(m.group(0))

    def telephone(self, written: str) -> str:
        """Digit groups said digit by digit, a pause between groups; a leading + is 'plus'."""
        groups = ", ".join(self.num.digits(g) for g in _DIGIT_GROUP.findall(written))
        return "plus " + groups if written.lstrip().startswith("+") else groups

    # --- SSML <say-as> -----------------------------------------------------------------------

    def say_as(self, kind: str, text: str, fmt: str | None) -> str | None:
        """``text`` read as ``kind`` (an SSML interpret-as) with the rules above.

        ``None``: the text does not fit that reading; the caller reads it normally.
        """
        plain = text.strip()
        if not plain:
            return None
        if kind in ("characters", "spell-out"):
            return self.spell_out(plain)
        if kind == "digits":
            return self.num.digits(plain) if any(c.isdigit() for c in plain) else None
        if kind == "telephone":
            return self.telephone(plain) if any(c.isdigit() for c in plain) else None
        if kind == "cardinal":
            m = _SAY_AS_NUMBER.fullmatch(plain)
            return self.num.number(m.group(0).replace(" ", "")) if m else None
        if kind == "ordinal":
            m = _SAY_AS_ORDINAL.fullmatch(plain)
            return self.num.ordinal(m.group(1)) if m else None
        if kind == "date":
            return self.dates.say_as(plain, fmt)
        if kind == "time":
            out = apply_rules(MappedText.identity(plain), [(_TIME, self._time)]).text
            return None if out == plain else out
        return None

    # --- ranges, times ------------------------------------------------------------------------

    def _year_range(self, m: re.Match[str]) -> str | None:
        a, b = m.group(1), m.group(2)
        if len(b) == 2:
            if int(b) <= int(a[2:]):
                return None  # 2027-01 is a year and month, not a range
            end = ("oh " + self.num.cardinal(int(b))) if b[0] == "0" else self.num.cardinal(int(b))
        else:
            end = self.num.year(int(b))
        return f"{self.num.year(int(a))} to {end}"

    def _time(self, m: re.Match[str]) -> str | None:
        hour = int(m.group("h"))
        minute = int(m.group("m")) if m.group("m") else 0
        ap = m.group("ap")
        if minute > 59 or hour > 24 or (ap and not 1 <= hour <= 12):
            return None
        spoken = "midnight" if hour == 0 and minute == 0 and not ap else self.num.cardinal(hour)
        if minute == 0:
            if not ap and 0 < hour <= 12:
                spoken += " o'clock"
            elif not ap and hour > 12:
                spoken += " hundred"
        elif minute < 10:
            spoken += " oh " + self.num.cardinal(minute)
        else:
            spoken += " " + self.num.cardinal(minute)
        if m.group("s"):
            sec = int(m.group("s"))
            spoken += f" and {self.num.cardinal(sec)} second{'' if sec == 1 else 's'}"
        if ap:
            spoken += " AM" if ap in "Aa" else " PM"
            if m.group("dot"):
                spoken += keep_period(m)
        return spoken

    # --- abbreviations ------------------------------------------------------------------------

    def _abbreviation(self, m: re.Match[str]) -> str | None:
        key = m.group(0)
        spoken, kind = _ABBREVIATIONS[key]
        s, end = m.string, m.end()
        dotted = key.endswith(".")
        if kind == "title":
            return spoken if dotted or _NEXT_IS_CAPITAL.match(s, end) else None
        if kind == "number":
            return spoken if _NEXT_IS_NUMBER.match(s, end) else None
        if kind == "place":
            street, person = spoken.split("|")
            next_capital = _NEXT_IS_CAPITAL.match(s, end) is not None
            after_name = _previous_is_name(s, m.start())
            if after_name or not next_capital:
                if not dotted and not after_name:
                    return None  # a bare "St" or "Dr" with no name around it
                return street + (keep_period(m) if dotted else "")
            return person
        if kind == "final" and dotted:
            return spoken + keep_period(m)
        return spoken

    # --- money, percentages, units ------------------------------------------------------------

    def _money(self, amount: str, names: tuple[str, str, str | None, str | None]) -> str:
        major_one, major_many, minor_one, minor_many = names
        whole, _, frac = amount.replace(",", "").partition(".")
        if frac and (len(frac) > 2 or minor_many is None):
            return f"{self.num.number(amount)} {major_many}"
        cents = int(frac.ljust(2, "0")) if frac else 0
        # Compare digit strings: amounts may be longer than int() accepts.
        has_units = whole.strip("0") != ""
        one = whole.lstrip("0") == "1"
        parts = []
        if has_units or not cents:
            parts.append(f"{self.num.integer(whole or '0')} {major_one if one else major_many}")
        if cents and minor_one is not None and minor_many is not None:
            parts.append(f"{self.num.cardinal(cents)} {minor_one if cents == 1 else minor_many}")
        return " and ".join(parts)

    def _currency(self, m: re.Match[str]) -> str:
        groups = m.groupdict()
        sym, a = m.group("sym"), m.group("a")
        sign = "minus " if m.group("neg") else ""
        if sym == "¢":
            return f"{sign}{self.num.number(a)} {'cent' if a == '1' else 'cents'}"
        names = _CURRENCIES[sym]
        b = groups.get("b")
        scale = groups.get("scale") or _SCALES.get(groups.get("abbr") or "")
        if scale:
            amount = self.num.number(a) + (f" to {self.num.number(b)}" if b else "")
            return f"{sign}{amount} {scale} {names[1]}"
        if b is None:
            return sign + self._money(a, names)
        if "." not in a and "." not in b:
            return f"{sign}{self.num.integer(a)} to {self.num.integer(b)} {names[1]}"
        return f"{sign}{self._money(a, names)} to {self._money(b, names)}"

    def _percent(self, m: re.Match[str]) -> str:
        word = "percent" if m.group("pc") == "%" else "per mille"
        return f"{self.num.number((m.group('sign') or '') + m.group('a'))} {word}"

    def _unit(self, m: re.Match[str]) -> str | None:
        unit, a = m.group("unit"), m.group("a")
        if unit == "s" and m.string[m.end("a")] != " ":
            return None  # "5s" is a model name more often than five seconds
        one, many = _UNITS[unit]
        return f"{self.num.number((m.group('sign') or '') + a)} " + self.dialect.spell(
            one if a == "1" else many
        )

    # --- decades, versions, fractions, math ---------------------------------------------------

    def _decade(self, m: re.Match[str]) -> str:
        if m.group("year"):
            return pluralize_number_words(self.num.year(int(m.group("year"))))
        return pluralize_number_words(self.num.cardinal(int(m.group("short") or m.group("bare"))))

    def _version(self, m: re.Match[str]) -> str:
        cue = m.group("cue")
        parts = (m.group("cued") or m.group("nums")).split(".")
        if cue is None and len(parts) == 4 and all(len(p) <= 3 and int(p) <= 255 for p in parts):
            return " dot ".join(self.num.integer(p) for p in parts)  # an IPv4 address
        spoken = " point ".join(self.num.integer(p) for p in parts)
        if cue is None:
            return spoken
        return ("version " if cue in "vV" else cue) + spoken

    def _fraction(self, m: re.Match[str]) -> str:
        special = _FRACTION_SPECIAL.get(m.group(0).replace("⁄", "/"))
        if special is not None:
            return special
        a, b = int(m.group(1)), int(m.group(2))
        if 0 < a < b <= 10:
            return f"{self.num.cardinal(a)} {self.num.fraction_denominator(b, a != 1)}"
        return f"{self.num.integer(m.group(1))} slash {self.num.integer(m.group(2))}"

    def _math(self, m: re.Match[str]) -> str:
        op = m.group("op") or m.group("cmp")
        if op:
            return _OPERATORS[op]
        if m.group("times"):
            return " times " if m.group("times").strip() != m.group("times") else " by "
        if m.group("fold"):
            return " times"
        if m.group("ratio"):
            return " to "
        if m.group("hash"):
            return "number "
        return " minus "

    # --- plain numbers ------------------------------------------------------------------------

    def _number(self, m: re.Match[str]) -> str:
        s = m.string
        a, frac, sign = m.group("a"), m.group("f") or m.group("f2"), m.group("sign") or ""
        if a is not None and not sign and not frac and len(a) == 4 and self._is_year(m):
            spoken = self.num.year(int(a))
        else:
            spoken = self.num.number(sign + (a or "") + (f".{frac}" if frac else ""))
        # Keep words apart where the number was glued to letters: "MP3", "4K".
        if m.start() > 0 and (s[m.start() - 1].isalpha() or s[m.start() - 1] == ","):
            spoken = " " + spoken  # also "1,2,3" → "one, two, three"
        if m.end() < len(s) and s[m.end()].isalpha():
            spoken += " "
        return spoken

    @staticmethod
    def _is_year(m: re.Match[str]) -> bool:
        n = int(m.group("a"))
        if not 1000 <= n <= 2099:
            return False
        prev = _PREV_WORD.search(m.string, max(0, m.start() - 30), m.start())
        prev_word = prev.group(1).lower() if prev else ""
        if n < 1100:
            # 1000-1099 are far more often counts than medieval years.
            return prev_word in _EARLY_YEAR_CUES
        if prev_word in _YEAR_CUES:
            return True
        if prev_word in _COUNT_CUES:
            return False
        nxt = _NEXT_WORD.match(m.string, m.end())
        return nxt is None or nxt.group(1) in _AFTER_YEAR


def _previous_is_name(s: str, start: int) -> bool:
    """A capitalised word that does not start its sentence precedes ``start`` ('Main St.')."""
    prev = _PREV_CAPITALIZED.search(s, max(0, start - 40), start)
    if prev is None:
        return False
    j = prev.start()
    while j > 0 and s[j - 1].isspace():
        j -= 1
    return j > 0 and s[j - 1] not in '.!?"“(:'


def _space(m: re.Match[str]) -> str:
    s = m.string
    if m.start() == 0 or m.end() == len(s) or s[m.end()] in ",.;:!?":
        return ""
    return " "


_AMERICAN = EnglishNormalizer(american=True)
_BRITISH = EnglishNormalizer(american=False)


def _dialect(language: str) -> EnglishNormalizer:
    american = language in ("en", "en_US") or language.startswith("en_US")
    return _AMERICAN if american else _BRITISH


def normalize(text: MappedText, language: str) -> MappedText:
    """Normalise English ``text``; ``language`` (en_US, en_GB …) picks the dialect."""
    return _dialect(language).normalize(text)


def say_as(kind: str, text: str, fmt: str | None, language: str) -> str | None:
    """SSML ``<say-as>``: ``text`` read as ``kind``; ``None`` when it does not fit."""
    return _dialect(language).say_as(kind, text, fmt)
