"""Frontend: cleaning, splitting and spans that point into the original text."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.doors.v1.protocol import ProtocolError
from appliance.text.frontend import (
    _SPACES,
    FrontendLimits,
    _char_clean,
    _strip,
    clean,
    prepare,
    split_clauses,
    split_sentences,
)
from appliance.text.textmap import MappedText

LIMITS = FrontendLimits(max_chars=20000, sentence_chars=400)


def texts(text: str) -> list[str]:
    return [c.text for c in prepare(text, "en_US", LIMITS)]


def test_emoji_and_pictographs_dropped() -> None:
    assert texts("Hello😀 world👍🏽!") == ["Hello world!"]
    assert texts("I ❤️ tea ☕.") == ["I tea ."] or texts("I ❤️ tea ☕.") == ["I tea."]


def test_fullwidth_punctuation_and_nfkc() -> None:
    assert clean("Ｈｅｌｌｏ，ｗｏｒｌｄ！ Ok？").text == "Hello,world! Ok?"
    assert clean("Yes。No").text == "Yes. No"
    assert clean("ﬁne").text == "fine"


def test_controls_removed_whitespace_collapsed() -> None:
    assert clean("a\x00b\x07 \t\n  c\u200bd").text == "ab cd"


@pytest.mark.parametrize(
    "text,count",
    [
        ("Dr. Smith is here. He left.", 2),
        ("Mr. and Mrs. Jones live on Baker St. near the park.", 1),
        ("Bring fruit, e.g. apples, i.e. red ones, etc. and bread.", 1),
        ("We met on Jan. 5 at noon.", 1),
        ("It costs 3.50 dollars. Really?", 2),
        ("Apples, pears, etc. Then we left.", 2),
        ("J. R. R. Tolkien wrote books.", 1),
        ("Wait... what? No!", 3),
    ],
)
def test_sentence_split_keeps_abbreviations(text: str, count: int) -> None:
    assert len(split_sentences(MappedText.identity(text))) == count


def test_a_sentence_within_the_limit_is_one_clause_however_long() -> None:
    """Piper encodes every sentence whole: so does ttsd, up to max_sentence_chars."""
    sentence = "word " * 79 + "end."  # 399 characters, no punctuation inside
    (clause,) = prepare(sentence, "en_US", LIMITS)
    assert clause.text == sentence and clause.sentence_end
    with_commas = "one, two; three: four - five, " * 13 + "end."
    assert len(with_commas) <= 400
    assert len(prepare(with_commas, "en_US", LIMITS)) == 1


def test_a_sentence_over_the_limit_is_cut_at_punctuation_only_if_it_can_be() -> None:
    sentence = "word " * 100 + "end."
    clauses = prepare(sentence, "en_US", LIMITS)
    assert len(clauses) == 2  # no punctuation: a bare space, as late as the limit allows
    assert all(len(c.text) <= 400 for c in clauses)
    assert len(clauses[0].text) > 390
    assert [c.sentence_end for c in clauses] == [False, True]


SPLITS = [
    # (sentence, limit, pieces): ; : and dashes first, then commas, bare spaces last.
    ("aaa bbb, ccc ddd; eee fff, ggg hhh.", 30, ["aaa bbb, ccc ddd;", "eee fff, ggg hhh."]),
    ("aaa bbb, ccc ddd - eee fff, ggg.", 28, ["aaa bbb, ccc ddd -", "eee fff, ggg."]),
    ("aaa bbb, ccc ddd eee fff ggg hhh.", 30, ["aaa bbb,", "ccc ddd eee fff ggg hhh."]),
    ("aaa bbb ccc ddd eee fff ggg hhh.", 20, ["aaa bbb ccc ddd eee", "fff ggg hhh."]),
    ("aaa bbb, ccc ddd eee fff ggg hhh.", 40, ["aaa bbb, ccc ddd eee fff ggg hhh."]),
    ("x" * 50, 20, ["x" * 20, "x" * 20, "x" * 10]),
]


@pytest.mark.parametrize(("sentence", "limit", "pieces"), SPLITS)
def test_long_sentence_cut_rule(sentence: str, limit: int, pieces: list[str]) -> None:
    got = split_clauses(MappedText.identity(sentence), limit)
    assert [p.text for p in got] == pieces


def test_first_clause_chars_is_an_opt_in_latency_cut() -> None:
    sentence = (
        "The committee met on a cold and windy morning to review the proposal for the new library."
    )
    assert len(split_clauses(MappedText.identity(sentence), 400)) == 1
    first, rest = split_clauses(MappedText.identity(sentence), 400, first_max=40)
    assert len(first.text) <= 40 and first.text.endswith("windy")
    assert rest.text.startswith("morning")
    limits = FrontendLimits(max_chars=20000, sentence_chars=400, first_clause_chars=40)
    assert len(prepare(sentence, "en_US", limits)) == 2
    assert len(prepare(sentence + " " + sentence, "en_US", limits)) == 3  # the first only


def test_spans_point_into_original() -> None:
    text = "  Ｈｅｌｌｏ😀  there.  Dr. Who?\n\nYes!"
    clauses = prepare(text, "en_US", LIMITS)
    assert [text[a:b] for a, b in (c.span for c in clauses)] == [
        "Ｈｅｌｌｏ😀  there.",
        "Dr. Who?",
        "Yes!",
    ]
    for c in clauses:
        for a, b in c.word_spans:
            assert c.span[0] <= a < b <= c.span[1]


def test_errors() -> None:
    with pytest.raises(ProtocolError) as e:
        prepare("", "en_US", LIMITS)
    assert e.value.code == "empty_text"
    with pytest.raises(ProtocolError) as e:
        prepare("🎉🎉", "en_US", LIMITS)
    assert e.value.code == "empty_text"
    with pytest.raises(ProtocolError) as e:
        prepare("x" * 20001, "en_US", LIMITS)
    assert e.value.code == "text_too_long"
    with pytest.raises(ProtocolError) as e:
        prepare("这是中文文本，不是英文。", "en_US", LIMITS)
    assert e.value.code == "unsupported_text"
    # A few foreign letters in English text are dropped, not babbled.
    assert "中" not in " ".join(texts("The word 中 means middle."))
    # A voice of another script family is not checked.
    assert prepare("Привет мир", "ru_RU", LIMITS)


@given(st.text(max_size=200))
def test_any_text_gives_valid_spans_or_a_protocol_error(text: str) -> None:
    try:
        clauses = prepare(text, "en_US", LIMITS)
    except ProtocolError as exc:
        assert exc.code in {"empty_text", "unsupported_text", "bad_request"}
        return
    for c in clauses:
        assert 0 <= c.span[0] <= c.span[1] <= len(text)
        assert c.text.strip() == c.text and c.text


# --- linear time (issue 32, item 3) -----------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text",
    ["." * 19_999 + "a", "!?" * 9_999 + "a", ".)" * 9_999 + "a", "a. " * 6_666, "a.a" * 6_666],
    ids=["dots", "bangs", "closers", "sentences", "dotted-word"],
)
def test_sentence_split_is_linear(text: str) -> None:
    # "." × 19 999 + "a" took 8 s in one regex call (backtracking through every shorter run),
    # and each sentence end copied the text before it: 0.9 s for "a. " × 6 666.
    mt = clean(text)
    t0 = time.thread_time()  # this thread's CPU: what a busy box adds does not count
    pieces = split_sentences(mt)
    assert time.thread_time() - t0 < 0.5
    assert "".join(p.text for p in pieces).replace(" ", "") == mt.text.replace(" ", "")


def test_abbreviation_check_reads_only_the_word_before() -> None:
    # The bounded look-back gives the answers the whole-text search gave.
    assert len(split_sentences(MappedText.identity("Call Dr. Smith. Now go."))) == 2
    assert len(split_sentences(MappedText.identity("See e.g. this. And that."))) == 2
    assert len(split_sentences(MappedText.identity("A. B. Smith came. He left."))) == 2
    assert len(split_sentences(MappedText.identity("x" * 100 + ". Then more."))) == 2


def _clean_reference(text: str) -> MappedText:
    """Cleaning as defined: each character through _char_clean, then whitespace runs."""
    mt = MappedText.identity(text).map_chars(_char_clean).sub(_SPACES, " ")
    return _strip(mt)


@given(st.text(max_size=120))
def test_clean_is_each_character_cleaned(text: str) -> None:
    assert clean(text) == _clean_reference(text)
