"""English normalisation: written form → spoken form, one table per category."""

from __future__ import annotations

import pytest

from appliance.text.normalize import normalize
from appliance.text.textmap import MappedText


def say(text: str, language: str = "en_US") -> str:
    return normalize(MappedText.identity(text), language).text


def table(cases: list[tuple[str, str]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("written", "spoken"), cases, ids=[c[0] for c in cases])


CARDINALS = [
    ("I have 3 cats.", "I have three cats."),
    ("0", "zero"),
    ("42", "forty-two"),
    ("105 items", "one hundred five items"),
    ("12345 steps", "twelve thousand three hundred forty-five steps"),
    ("1,000 steps", "one thousand steps"),
    (
        "1,234,567 people",
        "one million two hundred thirty-four thousand five hundred sixty-seven people",
    ),
    ("It is -4 now.", "It is minus four now."),
    ("It is −4 now.", "It is minus four now."),
    ("A +5 change", "A plus five change"),
    ("Pi is 3.14.", "Pi is three point one four."),
    ("0.5 of it", "zero point five of it"),
    ("It is .5 thick", "It is point five thick"),
    ("1,234.56 units", "one thousand two hundred thirty-four point five six units"),
    ("Agent 007", "Agent zero zero seven"),
    ("Pick 1,2,3", "Pick one, two, three"),
    (
        "A 20-digit 12345678901234567890",
        "A twenty-digit one two three four five six seven eight nine zero"
        " one two three four five six seven eight nine zero",
    ),
    ("He bought 3 MP3 players.", "He bought three MP three players."),
    ("A 4K TV", "A four K TV"),
    ("COVID-19 cases", "COVID-nineteen cases"),
    ("2 million users", "two million users"),
]

DECIMAL_VS_SENTENCE_END = [
    ("The price rose 3.5. Then it fell.", "The price rose three point five. Then it fell."),
    ("It costs 5. Then stop.", "It costs five. Then stop."),
    ("The rate is 2.75.", "The rate is two point seven five."),
    ("Count to 10.", "Count to ten."),
    ("Add 1.5. Then 2.5.", "Add one point five. Then two point five."),
    ("Ends in 0.1!", "Ends in zero point one!"),
]

ORDINALS = [
    ("the 1st time", "the first time"),
    ("the 2nd floor", "the second floor"),
    ("the 3rd row", "the third row"),
    ("the 4th wall", "the fourth wall"),
    ("the 11th hour", "the eleventh hour"),
    ("the 12th man", "the twelfth man"),
    ("the 21st century", "the twenty-first century"),
    ("the 22nd try", "the twenty-second try"),
    ("the 100th day", "the one hundredth day"),
    ("the 101st visitor", "the one hundred first visitor"),
]

CURRENCY = [
    ("It costs $3.50 today.", "It costs three dollars and fifty cents today."),
    ("$1", "one dollar"),
    ("$1.00", "one dollar"),
    ("$1.01", "one dollar and one cent"),
    ("$0.99", "ninety-nine cents"),
    ("$0.01", "one cent"),
    ("$1.5", "one dollar and fifty cents"),
    ("$1,234.56", "one thousand two hundred thirty-four dollars and fifty-six cents"),
    ("$2.5 million", "two point five million dollars"),
    ("$5M", "five million dollars"),
    ("$3B", "three billion dollars"),
    ("$10k", "ten thousand dollars"),
    ("$5-10", "five to ten dollars"),
    ("$5 to $10", "five to ten dollars"),
    ("$5.50–$6", "five dollars and fifty cents to six dollars"),
    ("-$5", "minus five dollars"),
    ("$.50", "fifty cents"),
    ("€5", "five euros"),
    ("€1", "one euro"),
    ("€2.30", "two euros and thirty cents"),
    ("5€", "five euros"),
    ("£0.99", "ninety-nine pence"),
    ("£1.01", "one pound and one penny"),
    ("£20", "twenty pounds"),
    ("¥500", "five hundred yen"),
    ("50¢", "fifty cents"),
    ("10 USD", "ten dollars"),
    ("USD 10", "ten dollars"),
    ("EUR 3", "three euros"),
    ("$3.505", "three point five zero five dollars"),
]

PERCENT = [
    ("25% off", "twenty-five percent off"),
    ("0.5% churn", "zero point five percent churn"),
    ("100 % sure", "one hundred percent sure"),
    ("-3% growth", "minus three percent growth"),
    ("5-10% more", "five to ten percent more"),
    ("2‰ of it", "two per mille of it"),
]

TIMES = [
    ("at 3:30 pm", "at three thirty PM"),
    ("at 3:30 PM", "at three thirty PM"),
    ("at 3:30pm", "at three thirty PM"),
    ("at 3:30 p.m. sharp", "at three thirty PM sharp"),
    ("at 9 a.m. Then lunch.", "at nine AM. Then lunch."),
    ("It starts at 9 a.m.", "It starts at nine AM."),
    ("at 7am", "at seven AM"),
    ("at 15:45", "at fifteen forty-five"),
    ("at 6:05", "at six oh five"),
    ("at 3:00", "at three o'clock"),
    ("at 15:00", "at fifteen hundred"),
    ("at 0:00", "at midnight"),
    ("at 00:30", "at zero thirty"),
    ("at 12:00 pm", "at twelve PM"),
    ("at 10:30:15", "at ten thirty and fifteen seconds"),
    ("at noon", "at noon"),
    ("open 9:00–17:00", "open nine o'clock to seventeen hundred"),
    ("open 10 a.m.-2 p.m. daily", "open ten AM to two PM daily"),
    ("John 3:16 says", "John three sixteen says"),
]

DATES = [
    ("on 12/05/2026", "on December fifth, twenty twenty-six"),
    ("on 1/5/2027.", "on January fifth, twenty twenty-seven."),
    ("on 13/05/2026", "on May thirteenth, twenty twenty-six"),
    ("on 12/05/26", "on December fifth, twenty twenty-six"),
    ("on 12.05.2026", "on May twelfth, twenty twenty-six"),
    ("on 2027-01-05", "on January fifth, twenty twenty-seven"),
    ("on Jan. 5, 2027", "on January fifth, twenty twenty-seven"),
    ("on Jan. 5. He left.", "on January fifth. He left."),
    ("on Jan 5", "on January fifth"),
    ("on January 5th", "on January fifth"),
    ("on Sept. 11", "on September eleventh"),
    ("on May 5", "on May fifth"),
    ("in January 2027", "in January twenty twenty-seven"),
    ("on 5 May 2027", "on the fifth of May twenty twenty-seven"),
    ("the 5th of May", "the fifth of May"),
    ("on 1st December", "on the first of December"),
]

YEARS = [
    ("in 1999", "in nineteen ninety-nine"),
    ("in 2027", "in twenty twenty-seven"),
    ("in 2005", "in two thousand five"),
    ("in 1905", "in nineteen oh-five"),
    ("in 1800", "in eighteen hundred"),
    ("in 2000", "in two thousand"),
    ("In 1999 people partied.", "In nineteen ninety-nine people partied."),
    ("1999 people came.", "one thousand nine hundred ninety-nine people came."),
    ("She sold 2027 cars.", "She sold two thousand twenty-seven cars."),
    ("The year 2027.", "The year twenty twenty-seven."),
    ("The 1999 season", "The nineteen ninety-nine season"),
    ("Over 1850 votes", "Over one thousand eight hundred fifty votes"),
    ("about 1850 in all", "about one thousand eight hundred fifty in all"),
    ("1999 was good.", "nineteen ninety-nine was good."),
    ("Born 1984.", "Born nineteen eighty-four."),
    ("since 1066", "since ten sixty-six"),
    ("the 1990s", "the nineteen nineties"),
    ("the 1990's", "the nineteen nineties"),
    ("the 2000s", "the two thousands"),
    ("the '80s", "the eighties"),
    ("in her 30s", "in her thirties"),
    ("summer of 1969", "summer of nineteen sixty-nine"),
    ("4000 years", "four thousand years"),
]

RANGES = [
    ("pages 5-10", "pages five to ten"),
    ("pages 5–10", "pages five to ten"),
    ("ages 5 – 10", "ages five to ten"),
    ("won 3-2", "won three to two"),
    ("from 1999–2001", "from nineteen ninety-nine to two thousand one"),
    ("in 2020-21", "in twenty twenty to twenty-one"),
    ("5–10 km", "five to ten kilometers"),
    ("20–25°C", "twenty to twenty-five degrees Celsius"),
    ("a 5-year-old", "a five-year-old"),
]

UNITS = [
    ("It is 5 km away.", "It is five kilometers away."),
    ("1 km", "one kilometer"),
    ("2.5 km", "two point five kilometers"),
    ("300 m", "three hundred meters"),
    ("12 cm", "twelve centimeters"),
    ("5mm", "five millimeters"),
    ("10 mi", "ten miles"),
    ("6 ft", "six feet"),
    ("1 ft", "one foot"),
    ("5 kg", "five kilograms"),
    ("1 lb", "one pound"),
    ("3 lbs", "three pounds"),
    ("250 g", "two hundred fifty grams"),
    ("2 L", "two liters"),
    ("500 ml", "five hundred milliliters"),
    ("It was −5°C.", "It was minus five degrees Celsius."),
    ("1 °C", "one degree Celsius"),
    ("98.6°F", "ninety-eight point six degrees Fahrenheit"),
    ("a 90° angle", "a ninety degrees angle"),
    ("60 mph", "sixty miles per hour"),
    ("100 km/h", "one hundred kilometers per hour"),
    ("30 m/s", "thirty meters per second"),
    ("16 GB", "sixteen gigabytes"),
    ("1 TB", "one terabyte"),
    ("512 MB", "five hundred twelve megabytes"),
    ("3.5 GHz", "three point five gigahertz"),
    ("15 ms", "fifteen milliseconds"),
    ("40 s", "forty seconds"),
    ("iPhone 5s", "iPhone five s"),
    ("25 min", "twenty-five minutes"),
    ("2 h", "two hours"),
    ("60 W", "sixty watts"),
    ("5 kWh", "five kilowatt hours"),
    ("100 Mbps", "one hundred megabits per second"),
    ("5 miles", "five miles"),
]

PHONE = [
    ("Call (555) 123-4567.", "Call five five five, one two three, four five six seven."),
    ("Call 555-123-4567", "Call five five five, one two three, four five six seven"),
    ("Call 555.123.4567", "Call five five five, one two three, four five six seven"),
    ("Call 1-800-555-0199", "Call one, eight zero zero, five five five, zero one nine nine"),
    ("Call 555-0199", "Call five five five, zero one nine nine"),
    (
        "Call +44 20 7946 0958",
        "Call plus four four, two zero, seven nine four six, zero nine five eight",
    ),
    ("Call +1 (555) 123-4567", "Call plus one, five five five, one two three, four five six seven"),
]

ABBREVIATIONS = [
    ("Dr. Smith is here.", "Doctor Smith is here."),
    ("Ask Dr. Smith.", "Ask Doctor Smith."),
    ("Mulholland Dr. is long.", "Mulholland Drive is long."),
    ("He lives on Elm Dr.", "He lives on Elm Drive."),
    ("Mr. Jones", "Mister Jones"),
    ("Mrs. Jones", "Missus Jones"),
    ("Ms. Jones", "Miz Jones"),
    ("Mr Jones", "Mister Jones"),
    ("Prof. Lee", "Professor Lee"),
    ("Mt. Everest", "Mount Everest"),
    ("Main St. is busy.", "Main Street is busy."),
    ("He lives on Elm St.", "He lives on Elm Street."),
    ("He lives on Elm St. We visit.", "He lives on Elm Street. We visit."),
    ("221 Baker St. in London", "two hundred twenty-one Baker Street in London"),
    ("St. Louis is big.", "Saint Louis is big."),
    ("Visit St. Louis.", "Visit Saint Louis."),
    ("on St. Patrick's Day", "on Saint Patrick's Day"),
    ("St Albans", "Saint Albans"),
    ("John Smith Jr. He left.", "John Smith Junior. He left."),
    ("John Smith Jr. left.", "John Smith Junior left."),
    ("Acme Inc. is big.", "Acme Incorporated is big."),
    ("apples, pears, etc.", "apples, pears, et cetera."),
    ("apples, etc. and more", "apples, et cetera and more"),
    ("fruit, e.g. apples", "fruit, for example apples"),
    ("fruit, e.g., apples", "fruit, for example, apples"),
    ("one, i.e. this", "one, that is this"),
    ("cats vs. dogs", "cats versus dogs"),
    ("cats vs dogs", "cats versus dogs"),
    ("Room No. 5", "Room number five"),
    ("He said No. Then left.", "He said No. Then left."),
    ("In Jan. we ski.", "In January we ski."),
    ("See Fig. 3", "See figure three"),
    ("No 5 (from №)", "number five (from №)"),
    ("No way", "No way"),
    ("Tom & Jerry", "Tom and Jerry"),
    ("the #1 hit", "the number one hit"),
]

URLS = [
    ("Mail john.smith@example.com now.", "Mail john dot smith at example dot com now."),
    ("Write to info@acme.co.uk.", "Write to info at acme dot co dot u k."),
    ("See https://www.example.com/docs.", "See w w w dot example dot com slash docs."),
    ("See http://example.org", "See example dot org"),
    ("Go to github.com/foo/bar now.", "Go to github dot com slash foo slash bar now."),
    ("Visit example.com.", "Visit example dot com."),
    ("Open www.test.io today", "Open w w w dot test dot i o today"),
]

MATH = [
    ("2 + 2 = 4", "two plus two equals four"),
    ("2+2=4", "two plus two equals four"),
    ("10 - 4 = 6", "ten minus four equals six"),
    ("10 − 4", "ten minus four"),
    ("3 × 4", "three times four"),
    ("3 x 4", "three times four"),
    ("3 * 4", "three times four"),
    ("8 ÷ 2", "eight divided by two"),
    ("5 ± 1", "five plus or minus one"),
    ("2^10", "two to the power of ten"),
    ("5 < 10", "five is less than ten"),
    ("x ≠ y", "x is not equal to y"),
    ("1920x1080", "one thousand nine hundred twenty by one thousand eighty"),
    ("3x faster", "three times faster"),
    ("C++ code", "C plus plus code"),
    ("a 16:9 screen", "a sixteen to nine screen"),
]

VERSIONS = [
    ("Version 3.11.7 is out.", "Version three point eleven point seven is out."),
    ("Get 3.11.7.", "Get three point eleven point seven."),
    ("Python 3.11 is fast", "Python three point eleven is fast"),
    ("Use v2.0 now", "Use version two point zero now"),
    ("Use v3 now", "Use version three now"),
    ("Ubuntu 22.04 LTS", "Ubuntu twenty-two point zero four LTS"),
    (
        "Host 192.168.1.10 is up",
        "Host one hundred ninety-two dot one hundred sixty-eight dot one dot ten is up",
    ),
    ("It costs 3.11 total", "It costs three point one one total"),
]

FRACTIONS = [
    ("1/2 cup", "one half cup"),
    ("3/4 of it", "three quarters of it"),
    ("1/4", "one quarter"),
    ("2/3 done", "two thirds done"),
    ("5/8 inch", "five eighths inch"),
    ("open 24/7", "open twenty-four seven"),
    ("a 50/50 chance", "a fifty fifty chance"),
    ("1⁄2 cup", "one half cup"),
    ("12/15 done", "twelve slash fifteen done"),
]

PLAIN_TEXT = [
    ("Hello, world!", "Hello, world!"),
    ("How are you today?", "How are you today?"),
    ("No numbers here.", "No numbers here."),
    ("The street is wide.", "The street is wide."),
    ("I may go in May.", "I may go in May."),
    ("I am here.", "I am here."),
]

BRITISH = [
    ("on 12/05/2026", "on the twelfth of May twenty twenty-six"),
    ("on 05/13/2026", "on the thirteenth of May twenty twenty-six"),
    ("on 2027-01-05", "on the fifth of January twenty twenty-seven"),
    ("5 km", "five kilometres"),
    ("2 L", "two litres"),
    ("105 items", "one hundred and five items"),
    ("in 2005", "in two thousand and five"),
    ("£3.50", "three pounds and fifty pence"),
    ("Mr Smith", "Mister Smith"),
]


@table(CARDINALS)
def test_cardinals(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(DECIMAL_VS_SENTENCE_END)
def test_decimal_point_is_not_a_sentence_end(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(ORDINALS)
def test_ordinals(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(CURRENCY)
def test_currency(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(PERCENT)
def test_percent(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(TIMES)
def test_times(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(DATES)
def test_dates(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(YEARS)
def test_years_and_counts(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(RANGES)
def test_ranges(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(UNITS)
def test_units(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(PHONE)
def test_phone_numbers(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(ABBREVIATIONS)
def test_abbreviations(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(URLS)
def test_urls_and_email(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(MATH)
def test_math_signs(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(VERSIONS)
def test_versions_and_addresses(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(FRACTIONS)
def test_fractions(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(PLAIN_TEXT)
def test_plain_text_is_unchanged(written: str, spoken: str) -> None:
    assert say(written) == spoken


@table(BRITISH)
def test_british_english(written: str, spoken: str) -> None:
    assert say(written, "en_GB") == spoken


ALL_TABLES = [
    CARDINALS,
    DECIMAL_VS_SENTENCE_END,
    ORDINALS,
    CURRENCY,
    PERCENT,
    TIMES,
    DATES,
    YEARS,
    RANGES,
    UNITS,
    PHONE,
    ABBREVIATIONS,
    URLS,
    MATH,
    VERSIONS,
    FRACTIONS,
    PLAIN_TEXT,
    BRITISH,
]


def test_the_tables_cover_at_least_150_cases() -> None:
    assert sum(len(t) for t in ALL_TABLES) >= 150


@pytest.mark.parametrize("written", [w for t in ALL_TABLES[:-1] for w, _ in t])
def test_output_has_no_digits_left(written: str) -> None:
    # Every number in the tables is spoken; espeak never gets to guess at digits.
    out = say(written)
    assert not any(c.isdigit() for c in out), out
