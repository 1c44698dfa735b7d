"""Every parse of the text layer is linear in its source (issue 42, item 11).

A regular expression holds the GIL for as long as one match attempt scans: the plain
reading's scanned a run of table pipes from each of its characters, and ``"|" * 19_999 +
"a"`` held every door of the daemon for 1.5 s.  These tests time each parse (CPU time of
this thread: what holds the GIL, whatever else the box runs) over runs of each character
class at 2 000 and 20 000 characters: the 20 000-character case may cost about ten times the
2 000-character one (linear), plus a slack for the switch from markdown-it to the plain
reading past the budget, not a hundred times (quadratic), and stays under a sanity bound.

And every compiled regular expression of appliance/text (the stream rules in text/cuts too)
is timed on its own, over the same runs: a pattern used anywhere but in ``.match`` or
``.fullmatch`` (one attempt, where the caller says) is tried at every position by
``search``/``finditer``/``sub``, and must not rescan a run from each of its characters.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import string
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import appliance
import appliance.text
from appliance.text import markdown, markdown_budget

CLASSES = string.punctuation + " \t\n0a" + "é\u00a0’"
"""Each ASCII punctuation character, the whitespace Markdown reads, a digit, a letter, and
three characters past ASCII (a letter, a no-break space, a closing quote)."""
SHAPES: dict[str, Callable[[str, int], str]] = {
    "run": lambda c, n: c * (n - 1) + "a",  # a run that does not end its line
    "word run word": lambda c, n: "a" + c * (n - 2) + "a",
    "spaced": lambda c, n: (c + " ") * (n // 2),
    "between letters": lambda c, n: ("a" + c) * (n // 2),
    "lines": lambda c, n: ("a" + c + "\n") * (n // 3),
}
SANITY_MS = 500.0
"""A 20 000-character parse past this is broken, whatever the box (the bench's figure for
the worst source is ~25 ms; a shared 2-core box under load: ~100 ms)."""
PLAIN = markdown.MarkdownOptions(spent=markdown_budget.BUDGET)
"""The budget spent before the source: all of it read plainly (markdown_budget.read_plain)."""


def _cpu_ms(fn: Callable[[], object], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best * 1000.0


def _costs(
    fn: Callable[[str], object],
    make: Callable[[int], str],
    sizes: tuple[int, int] = (2_000, 20_000),
    slack_ms: float = 25.0,
    growth: float = 1.2,
) -> str:
    """Why ``fn`` over ``make(big)`` is not linear against ``make(small)``; "" if it is.
    ``slack_ms``: a cost that does not grow with the source (markdown-it's part of it, a
    first call); ``growth``: how far past the size ratio the cost may grow (a rescan from
    each character grows by the size ratio squared).  Measured again, with more tries,
    before it is blamed (a busy box)."""
    small, big = sizes
    a, b = make(small), make(big)
    for reps in (1, 3, 9):
        t_small = _cpu_ms(lambda: fn(a), reps + 1)
        t_big = _cpu_ms(lambda: fn(b), reps)
        if t_big <= growth * (big / small) * t_small + slack_ms and t_big <= SANITY_MS:
            return ""
    return f"{small}: {t_small:.1f} ms, {big}: {t_big:.1f} ms"


def _parse(source: str) -> object:
    return markdown.parse(source)


def _parse_plain(source: str) -> object:
    return markdown.parse(source, PLAIN)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("char", list(CLASSES), ids=[f"U+{ord(c):04X}" for c in CLASSES])
def test_markdown_parse_is_linear_in_runs_of_each_class(char: str) -> None:
    """``"|" * 19_999 + "a"`` took 12 s of CPU here (1.5 s on the bench), ``"a" + "_" *
    19_998 + "a"`` as long, ``"] " * 10_000`` 0.4 s: each a run rescanned from each of its
    characters."""
    slow = []
    for shape, make in SHAPES.items():
        for reading, parse in (("markdown", _parse), ("plain", _parse_plain)):
            why = _costs(parse, lambda n, m=make: m(char, n))
            if why:
                slow.append(f"{shape} ({reading}): {why}")
    assert not slow, slow


@st.composite
def _runs(draw: st.DrawFn) -> Callable[[int], str]:
    """A source of ``n`` characters: a line start (a block marker or none), then a unit of
    one to four characters of :data:`CLASSES` repeated."""
    lead = draw(st.sampled_from(["", "a", "- ", "> ", "# ", "| ", "1. ", "```\n", "[a]: "]))
    unit = draw(st.text(st.sampled_from(CLASSES), min_size=1, max_size=4))
    tail = draw(st.sampled_from(["", "a", "\n", " a"]))

    def make(n: int) -> str:
        body = n - len(lead) - len(tail)
        return lead + (unit * (body // len(unit) + 1))[:body] + tail

    return make


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_runs())
def test_markdown_parse_is_linear_over_generated_runs(make: Callable[[int], str]) -> None:
    for parse in (_parse, _parse_plain):
        why = _costs(parse, make)
        assert not why, (make(40), why)


def _modules() -> Iterator[object]:
    for info in pkgutil.walk_packages(appliance.text.__path__, "appliance.text."):
        yield importlib.import_module(info.name)


def _patterns() -> dict[str, re.Pattern[str] | re.Pattern[bytes]]:
    """Every compiled pattern a module of the text layer holds, by where it is: a module's
    global, or in a list, tuple, dict or object (a normaliser's rules) it holds."""
    found: dict[str, re.Pattern[str] | re.Pattern[bytes]] = {}

    def add(where: str, obj: object, depth: int) -> None:
        if isinstance(obj, re.Pattern):
            if not any(p.pattern == obj.pattern for p in found.values()):
                found[where] = obj
        elif depth < 3 and isinstance(obj, list | tuple):
            for k, item in enumerate(obj):
                add(f"{where}[{k}]", item, depth + 1)
        elif depth < 3 and isinstance(obj, dict):
            for key, item in obj.items():
                add(f"{where}[{key!r}]", item, depth + 1)
        elif depth < 2 and type(obj).__module__.startswith("appliance.text"):
            for key, item in getattr(obj, "__dict__", {}).items():
                add(f"{where}.{key}", item, depth + 1)

    for module in _modules():
        for name, value in vars(module).items():
            add(f"{module.__name__}.{name}", value, 0)  # type: ignore[attr-defined]
    return found


_ONE_ATTEMPT = {"match", "fullmatch"}


def _anchored(where: str) -> bool:
    """Is the module global ``where`` only ever used in one attempt where its caller says
    (``.match``/``.fullmatch``), in its module and in any that imports it by name?  Then it
    is timed in that one attempt, not at every position (a run of spaces before a line's
    end is looked at once, after what precedes it, never from each of its spaces)."""
    module, name = where.rsplit(".", 1)
    if not re.fullmatch(r"_[A-Z_0-9]+", name):
        return False  # in a list or an object: applied with search and sub
    home = importlib.import_module(module).__file__
    assert home is not None
    sources = [
        text
        for path in Path(appliance.__file__).parent.rglob("*.py")
        if (text := path.read_text())
        and (str(path) == home or re.search(rf"^from {module} import .*\b{name}\b", text, re.M))
    ]
    uses = [u for text in sources for u in re.findall(rf"\b{name}\b(?!\s*=)(\.\w+)?", text)]
    return bool(uses) and all(use.lstrip(".") in _ONE_ATTEMPT for use in uses)


def _scan(pattern: re.Pattern[str] | re.Pattern[bytes], anchored: bool) -> Callable[[str], object]:
    def run(text: str) -> object:
        subject: str | bytes = text
        if isinstance(pattern.pattern, bytes):
            subject = text.encode("latin-1", "replace")
        if anchored:
            return pattern.match(subject)  # type: ignore[arg-type]
        return sum(1 for _ in pattern.finditer(subject))  # type: ignore[arg-type]

    return run


PATTERNS = _patterns()


def test_the_audit_sees_the_patterns_it_must() -> None:
    """The collection finds the plain reading's, the caps', the normalisers' (in lists) and
    the stream rule's patterns: a pattern it missed would go untimed."""
    assert len(PATTERNS) > 80
    wheres = set(PATTERNS)
    assert "appliance.text.markdown_budget._PLAIN" in wheres
    assert "appliance.text.markdown._BRACKET" in wheres
    assert "appliance.text.cuts.blocks._BLOCK_START" in wheres
    assert any(w.startswith("appliance.text.normalize.de._RULES.rules[") for w in wheres)
    assert _anchored("appliance.text.markdown_budget._LINE_END")
    assert _anchored("appliance.text.ssml._TIME")  # not en's nor the continental _TIME
    assert not _anchored("appliance.text.normalize.en._TIME")
    assert not _anchored("appliance.text.markdown_budget._PLAIN")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("where", list(PATTERNS))
def test_every_regular_expression_is_linear(where: str) -> None:
    """The German and Spanish date rules' ``(\\w+)\\s+`` read the rest of a word from each
    of its letters (a 16 000-letter word: 8 s in one search); the plain reading's line-end
    look-ahead a run of pipes from each pipe.  Runs of 500 and 4 000 characters: a rescan
    costs 64 times more, linear 8; up to 16 is allowed, as a sub-millisecond scan of the
    short run is timed coarsely on a loaded CI box (0.6 against 7.7 ms once, for a linear
    scan)."""
    scan = _scan(PATTERNS[where], _anchored(where))
    slow = []
    for char in CLASSES:
        for shape, make in SHAPES.items():
            why = _costs(scan, lambda n, m=make, c=char: m(c, n), (500, 4_000), 2.0, 2.0)
            if why:
                slow.append(f"{char!r} {shape}: {why}")
    assert not slow, slow
