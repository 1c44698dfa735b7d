"""English number words (cardinal, ordinal, year, decimal, digit strings) for one dialect.

num2words does the arithmetic of words; this module only adapts its output to what a
speaker says and what espeak reads well: no commas inside a number (they would become
pauses and clause cuts), and no "and" after "hundred" in American English.
"""

from __future__ import annotations

from num2words.lang_EN import Num2Word_EN

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# Beyond this many digits nobody says the number as a quantity; read it digit by digit.
_MAX_CARDINAL_DIGITS = 15


class EnglishNumbers:
    """Spells numbers for one English dialect; stateless after construction."""

    def __init__(self, *, american: bool) -> None:
        self.american = american
        # Num2Word_EN keeps no per-call state for integers, so one instance can be shared.
        self._n2w = Num2Word_EN()

    def _clean(self, words: str) -> str:
        words = words.replace(",", "")
        if self.american:
            words = words.replace(" and ", " ")
        return words

    def cardinal(self, n: int) -> str:
        if n < 0:
            return "minus " + self.cardinal(-n)
        if n >= 10**_MAX_CARDINAL_DIGITS:
            return self.digits(str(n))
        return self._clean(self._n2w.to_cardinal(n))

    def ordinal(self, written: str) -> str:
        """'22' or '1,000' → 'twenty-second', 'one thousandth'."""
        plain = written.replace(",", "")
        if len(plain) > _MAX_CARDINAL_DIGITS:
            return self.digits(plain)
        return self._clean(self._n2w.to_ordinal(int(plain)))

    def year(self, n: int) -> str:
        if abs(n) >= 10**_MAX_CARDINAL_DIGITS:
            return self.digits(str(n))  # num2words overflows past 10**306
        return self._clean(self._n2w.to_year(n))

    @staticmethod
    def digits(s: str) -> str:
        """'2047' → 'two zero four seven' (non-digits are dropped)."""
        return " ".join(DIGIT_WORDS[ord(c) - 48] for c in s if "0" <= c <= "9")

    def integer(self, s: str) -> str:
        """An unsigned digit string, possibly with thousands commas: '1,234', '007', '42'."""
        plain = s.replace(",", "")
        if (len(plain) > 1 and plain[0] == "0") or len(plain) > _MAX_CARDINAL_DIGITS:
            return self.digits(plain)  # "007", or too long to say as a quantity
        return self.cardinal(int(plain))

    def number(self, s: str) -> str:
        """A written number: optional sign, integer part, optional decimals ('-1,234.50')."""
        sign = ""
        if s[:1] in "-−":
            sign, s = "minus ", s[1:]
        elif s[:1] == "+":
            sign, s = "plus ", s[1:]
        whole, _, frac = s.partition(".")
        words = self.integer(whole) if whole else ""
        if frac:
            words = (words + " point " if words else "point ") + self.digits(frac)
        return sign + words

    def fraction_denominator(self, n: int, plural: bool) -> str:
        if n == 2:
            return "halves" if plural else "half"
        if n == 4:
            return "quarters" if plural else "quarter"
        word = self.ordinal(str(n))
        return word + "s" if plural else word


def pluralize_number_words(words: str) -> str:
    """'nineteen ninety' → 'nineteen nineties' (decades: the 1990s, the '80s)."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + "s"
