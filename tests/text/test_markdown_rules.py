"""The guarded markdown-it rules (appliance.text.markdown_rules) change nothing but time.

Every Markdown source of the tests, the bench's reply and hostile sources, and a few
thousand generated documents are parsed with the plain configured parser and the guarded
one: the tokens (children included) and the blocks read from them must be equal."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from appliance.text import markdown
from appliance.text.markdown import MarkdownOptions, parse
from bench.markdown import REPLY, _reply_2k
from tests.text.markdown_cases import CASES, HOSTILE

PLAIN = markdown._parser(guarded=False)
GUARDED = markdown._parser()


def _literals(path: Path) -> list[str]:
    """Every string constant of a test module: its Markdown sources, wherever written."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


TESTS = Path(__file__).parent
SOURCES = sorted(
    {
        *(c[1] for c in CASES),
        *HOSTILE.values(),
        REPLY,
        _reply_2k(),
        *_literals(TESTS / "test_markdown.py"),
        *_literals(TESTS / "cuts" / "test_blocks.py"),
    }
)

# Lines that start (or underline, or end) every kind of block, and text between them.
_LINES = [
    "text *em* and **strong** `code` [link](u) ![img](i) <b>x</b> &amp; \\*",
    "plain words only",
    "a line ending in two spaces  ",
    "a line ending in a backslash\\",
    "",
    "",
    "# heading",
    "#no heading",
    "===",
    "---",
    "- - -",
    "***",
    "___",
    "*\t* *",
    "- item",
    "-item",
    "* item",
    "+ item",
    "1. item",
    "2) item",
    "10. item",
    "0. item",
    "  - nested",
    "    indented code",
    "\tindented by a tab",
    "> quote",
    ">> deeper",
    ">",
    "```",
    "```python",
    "~~~",
    "| a | b |",
    "|---|---|",
    "|:-:|--:|",
    "a | b",
    "-|-",
    ":-|-:",
    "-- |\t--",
    "- |",
    "|a",
    "|-",
    ": not a table",
    "<div>",
    "</div>",
    "<!-- comment -->",
    "<script>x</script>",
    "[ref]: /url",
    "[ref]",
    "Setext",
    "   - three-space item",
    "    - four-space item",
    "1. \n   lazy",
]


def _documents(count: int, seed: int = 28) -> list[str]:
    rng = random.Random(seed)
    return ["\n".join(rng.choices(_LINES, k=rng.randint(1, 14))) for _ in range(count)]


def _tokens(md: MarkdownIt, source: str) -> list[dict[str, object]]:
    return [t.as_dict() for t in md.parse(source)]


def _blocks(md: MarkdownIt, source: str, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    monkeypatch.setattr(markdown, "_MD", md)
    read = []
    for options in (MarkdownOptions(), MarkdownOptions(code_blocks="read")):
        read.append(parse(source, options))
    return read


def test_the_rules_are_guarded_not_reordered() -> None:
    for chain in ("", "paragraph", "reference", "blockquote", "list"):
        plain = [r.__name__.lstrip("_") for r in PLAIN.block.ruler.getRules(chain)]
        guarded = [r.__name__.lstrip("_") for r in GUARDED.block.ruler.getRules(chain)]
        assert guarded == plain, chain
    assert GUARDED.inline.ruler.get_active_rules() == PLAIN.inline.ruler.get_active_rules()
    assert GUARDED.core.ruler.get_active_rules() == PLAIN.core.ruler.get_active_rules()


@pytest.mark.parametrize("source", SOURCES, ids=range(len(SOURCES)))
def test_test_sources_parse_the_same(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _tokens(GUARDED, source) == _tokens(PLAIN, source)
    assert _blocks(GUARDED, source, monkeypatch) == _blocks(PLAIN, source, monkeypatch)


def test_generated_documents_parse_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    for source in _documents(1500):
        assert _tokens(GUARDED, source) == _tokens(PLAIN, source), source
        # Nested in a list item and a quote: the rules run with other indents and parents.
        for nested in ("- " + source.replace("\n", "\n  "), "> " + source.replace("\n", "\n> ")):
            assert _tokens(GUARDED, nested) == _tokens(PLAIN, nested), nested
    for source in _documents(200, seed=29):
        assert _blocks(GUARDED, source, monkeypatch) == _blocks(PLAIN, source, monkeypatch)
