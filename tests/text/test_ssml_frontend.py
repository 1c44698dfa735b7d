"""The frontend's SSML path: clauses with pauses, marks, prosody, say-as and phoneme overrides."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest

from appliance.doors.v1.protocol import ErrorCode, ProtocolError
from appliance.model.voices import VoiceInfo, bundled_voice_path
from appliance.text.frontend import Clause, ClauseMark, FrontendLimits, PhonemeOverride, prepare
from appliance.text.normalize import normalize
from appliance.text.phonemize import Phonemizer
from appliance.text.textmap import MappedText

LIMITS = FrontendLimits(max_chars=20000, sentence_chars=400)


def ssml(src: str, language: str = "en_US") -> list[Clause]:
    return prepare(src, language, LIMITS, text_format="ssml")


def texts(src: str) -> list[str]:
    return [c.text for c in ssml(src)]


@cache
def phonemizer() -> Phonemizer:
    path = bundled_voice_path()
    cfg = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
    return Phonemizer(VoiceInfo.from_config("en_US-joe-medium", cfg))


# --- plain text stays plain -------------------------------------------------------------------


def test_plain_text_never_parses_markup() -> None:
    (c,) = prepare("<speak>Hi <break time='1s'/> there</speak>", "en_US", LIMITS)
    assert "speak" in c.text and "break" in c.text
    assert (c.pause_before_ms, c.pause_after_ms, c.marks, c.phonemes) == (0, 0, (), ())


def test_plain_text_inline_phonemes_stay_text() -> None:
    (c,) = prepare("Say [[ həlˈoʊ ]] now.", "en_US", LIMITS)
    assert c.phonemes == ()
    assert "Say" in c.text and "now" in c.text


def test_plain_and_ssml_agree_on_plain_content() -> None:
    text = "Dr. Smith paid $5 on 3/4/2026, then left. Twelve people came."
    plain = prepare(text, "en_US", LIMITS)
    marked = ssml(f"<speak>{text}</speak>")
    assert [c.text for c in marked] == [c.text for c in plain]
    offset = len("<speak>")
    assert [c.span for c in marked] == [
        (a + offset, b + offset) for a, b in (c.span for c in plain)
    ]


def test_unknown_text_format_is_bad_request() -> None:
    with pytest.raises(ProtocolError) as exc:
        prepare("hi", "en_US", LIMITS, text_format="rtf")
    assert exc.value.code == ErrorCode.BAD_REQUEST


# --- spans ------------------------------------------------------------------------------------


def test_spans_and_word_spans_index_the_ssml_source() -> None:
    src = "<speak><s>Hello <emphasis>big</emphasis> world.</s><s>Caf&#233; time.</s></speak>"
    clauses = ssml(src)
    assert [src[a:b] for a, b in clauses[0].word_spans] == ["Hello", "big", "world."]
    assert src[slice(*clauses[1].span)] == "Caf&#233; time."


def test_sub_alias_maps_to_its_content() -> None:
    src = "<speak>Visit the <sub alias='World Wide Web'>WWW</sub> today.</speak>"
    (c,) = ssml(src)
    assert c.text == "Visit the World Wide Web today."
    assert {src[a:b] for a, b in c.word_spans[2:5]} == {"WWW"}


# --- structure, breaks, marks -----------------------------------------------------------------


def test_sentences_and_paragraphs_end_clauses() -> None:
    clauses = ssml("<speak><p><s>one</s><s>two</s></p><p>three</p></speak>")
    assert [c.text for c in clauses] == ["one", "two", "three"]
    assert all(c.sentence_end for c in clauses)


BREAK_CASES = [
    # (ssml, clause texts, pauses before, pauses after, pauses inside: (clause, position, ms))
    ("<speak>a b<break time='500ms'/>c d</speak>", ["a b c d"], [0], [0], [(0, 4, 500)]),
    ("<speak><break time='1s'/>go</speak>", ["go"], [1000], [0], []),
    ("<speak>stop<break time='250ms'/></speak>", ["stop"], [0], [250], []),
    (
        "<speak>x<break time='100ms'/><break strength='weak'/>y</speak>",
        ["x y"],
        [0],
        [0],
        [(0, 2, 300)],
    ),
    ("<speak><s>x.</s><break/><s>y.</s></speak>", ["x.", "y."], [0, 400], [0, 0], []),
    ("<speak>x<break strength='none'/>y</speak>", ["x y"], [0], [0], []),
    (
        "<speak>x" + "<break time='9s'/>" * 3 + "y" + "<break time='6s'/>" * 2 + "</speak>",
        ["x y"],
        [0],
        [10_000],
        [(0, 2, 10_000)],
    ),
    ("<speak>One. <break time='1s'/>Two.</speak>", ["One.", "Two."], [0, 1000], [0, 0], []),
]


@pytest.mark.parametrize(("src", "want", "before", "after", "inside"), BREAK_CASES)
def test_breaks_become_pauses(
    src: str,
    want: list[str],
    before: list[int],
    after: list[int],
    inside: list[tuple[int, int, int]],
) -> None:
    """A break between sentences is a pause between clauses; one between two words of a
    sentence is spliced into the sentence's audio (the sentence is encoded whole)."""
    clauses = ssml(src)
    assert [c.text for c in clauses] == want
    assert [c.pause_before_ms for c in clauses] == before
    assert [c.pause_after_ms for c in clauses] == after
    assert [(k, p.position, p.ms) for k, c in enumerate(clauses) for p in c.pauses] == inside


def test_break_inside_a_sentence_does_not_cut_it() -> None:
    (clause,) = ssml("<speak>Wait for it <break time='1s'/> now.</speak>")
    assert clause.text == "Wait for it now." and clause.sentence_end
    assert [(p.position, p.ms) for p in clause.pauses] == [(12, 1000)]


def marks(clauses: list[Clause]) -> list[tuple[int, str, int]]:
    return [(k, m.name, m.position) for k, c in enumerate(clauses) for m in c.marks]


MARK_CASES = [
    # speech-dispatcher's shape: a mark before each sentence
    (
        "<speak><mark name='0'/>Hello there.<mark name='1'/>How are you?</speak>",
        [(0, "0", 0), (0, "1", 12)],
    ),
    (
        "<speak><s><mark name='0'/>Hello there.</s><s><mark name='1'/>How are you?</s></speak>",
        [(0, "0", 0), (1, "1", 0)],
    ),
    # a mark per word
    (
        "<speak><mark name='a'/>one <mark name='b'/>two <mark name='c'/>three</speak>",
        [(0, "a", 0), (0, "b", 4), (0, "c", 8)],
    ),
    # at a break between words: both at its place (the source order says which side)
    (
        "<speak>one <mark name='before'/><break time='1s'/><mark name='after'/>two</speak>",
        [(0, "before", 4), (0, "after", 4)],
    ),
    ("<speak>end<mark name='last'/></speak>", [(0, "last", 3)]),
    ("<speak>x<mark name='m1'/><mark name='m2'/> y</speak>", [(0, "m1", 1), (0, "m2", 1)]),
    # around prosody: the clause that holds the sound after the mark
    (
        "<speak>a <mark name='p'/><prosody rate='slow'>b</prosody><mark name='q'/> c</speak>",
        [(1, "p", 0), (2, "q", 0)],
    ),
]


@pytest.mark.parametrize(("src", "want"), MARK_CASES)
def test_mark_positions(src: str, want: list[tuple[int, str, int]]) -> None:
    assert marks(ssml(src)) == want


def test_marks_keep_document_order_across_clauses() -> None:
    words = (
        "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
        "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
        "zulu apple banana cherry damson elder fig grape hazel iris jasmine kale lemon "
        "mango nutmeg"
    ).split()
    src = "<speak>" + " ".join(f"<mark name='{i}'/>{w}" for i, w in enumerate(words)) + "</speak>"
    short = FrontendLimits(max_chars=20000, sentence_chars=100)
    clauses = prepare(src, "en_US", short, text_format="ssml")
    assert len(clauses) > 1  # cut into clauses by length
    names = [m.name for c in clauses for m in c.marks]
    assert names == [str(i) for i in range(len(words))]
    for c in clauses:
        for m in c.marks:
            assert c.text[m.position :].startswith(words[int(m.name)])


# --- prosody ----------------------------------------------------------------------------------


def test_prosody_cuts_clauses_and_sets_speed_and_volume() -> None:
    clauses = ssml(
        "<speak>Normal, <prosody rate='x-slow' volume='+6dB'>slow and loud</prosody> normal."
        "</speak>"
    )
    assert [c.text for c in clauses] == ["Normal,", "slow and loud", "normal."]
    assert [c.speed for c in clauses] == [1.0, 0.5, 1.0]
    assert clauses[1].volume == pytest.approx(10 ** (6 / 20))
    assert clauses[0].volume == clauses[2].volume == 1.0


# --- say-as: the normaliser's rules -----------------------------------------------------------

SAY_AS = [
    ("characters", None, "IBM", "i b m"),
    ("spell-out", None, "R2-D2", "r two dash d two"),
    ("verbatim", None, "ok", "o k"),
    ("characters", None, "ABC", "eh b c"),  # the letter a, not the article
    ("cardinal", None, "12,345", "twelve thousand three hundred forty-five"),
    ("cardinal", None, "-7", "minus seven"),
    ("ordinal", None, "21", "twenty-first"),
    ("ordinal", None, "3rd", "third"),
    ("digits", None, "2047", "two zero four seven"),
    ("date", "mdy", "11/30/2026", "November thirtieth, twenty twenty-six"),
    ("date", "dmy", "30.11.2026", "the thirtieth of November twenty twenty-six"),
    ("date", "ymd", "2026-11-30", "November thirtieth, twenty twenty-six"),
    ("date", "md", "12/25", "December twenty-fifth"),
    ("date", "y", "1999", "nineteen ninety-nine"),
    ("date", None, "7/4/1976", "July fourth, nineteen seventy-six"),
    ("time", "hms24", "15:30", "fifteen thirty"),
    ("time", "hms12", "9:05am", "nine oh five AM"),
    ("telephone", None, "555-0199", "five five five, zero one nine nine"),
    (
        "telephone",
        None,
        "+44 20 7946 0958",
        "plus four four, two zero, seven nine four six, zero nine five eight",
    ),
    # does not fit the reading: read as usual
    ("cardinal", None, "abc", "abc"),
    ("date", "mdy", "13/45/2026", normalize(MappedText.identity("13/45/2026"), "en_US").text),
    ("unknown-kind", None, "42", "forty-two"),
]


@pytest.mark.parametrize(("kind", "fmt", "written", "said"), SAY_AS)
def test_say_as(kind: str, fmt: str | None, written: str, said: str) -> None:
    f = f" format='{fmt}'" if fmt else ""
    src = f"<speak>x <say-as interpret-as='{kind}'{f}>{written}</say-as> y</speak>"
    (c,) = ssml(src)
    assert c.text == f"x {said} y"
    # The spoken form points into the say-as content.
    lo = src.index(f">{written}<") + 1
    assert all(lo <= a < b <= lo + len(written) for a, b in c.word_spans[1:-1])


@pytest.mark.parametrize("written", ["3/4/2026", "2026-11-30", "555-0199", "9:05am", "1,234,567"])
def test_say_as_agrees_with_the_normaliser_where_it_guesses_the_same(written: str) -> None:
    """Not a second implementation: say-as of the form the normaliser detects says the same."""
    kind = {"3/4/2026": "date", "2026-11-30": "date", "555-0199": "telephone"}.get(
        written, "time" if "am" in written else "cardinal"
    )
    fmt = " format='ymd'" if written.startswith("2026") else ""
    (c,) = ssml(f"<speak><say-as interpret-as='{kind}'{fmt}>{written}</say-as></speak>")
    assert c.text == normalize(MappedText.identity(written), "en_US").text


def test_say_as_characters_is_not_normalised_again() -> None:
    (c,) = ssml("<speak><say-as interpret-as='characters'>St</say-as></speak>")
    assert c.text == "s t"  # not "Street"/"Saint"


# --- phoneme input ----------------------------------------------------------------------------


def test_phoneme_override_covers_its_word() -> None:
    (c,) = ssml("<speak>I say <phoneme ph='təˈmɑːtoʊ'>tomato</phoneme> again.</speak>")
    assert c.text == "I say tomato again."
    assert c.phonemes == (PhonemeOverride(6, 12, "təˈmɑːtoʊ"),)


def test_phoneme_input_changes_the_ids_as_written() -> None:
    ph = phonemizer()
    m = ph.info.phoneme_id_map
    ipa = "təˈmɑːtoʊ"
    (c,) = ssml(f"<speak>I say <phoneme ph='{ipa}'>tomato</phoneme> again.</speak>")
    with_override = ph.phonemes_with(c.text, c.phonemes)
    plain = ph.phonemes(c.text)
    assert with_override != plain
    want = [m[s][0] for s in ipa]
    ids = ph.ids_for(with_override).tolist()
    # The ids carry the IPA's symbols in order, each followed by the pad as usual.
    pad = m["_"][0]
    flat = [i for i in ids if i != pad]
    assert any(flat[k : k + len(want)] == want for k in range(len(flat)))
    # Around it, espeak's own phonemes of the other words.
    assert ph.phonemes("I say")[:3] == with_override[:3]
    assert with_override[-1] == "."
    assert isinstance(ph.ids_for(with_override), np.ndarray)


def test_whole_clause_of_phonemes() -> None:
    (c,) = ssml("<speak><phoneme ph='həlˈoʊ'>hello</phoneme></speak>")
    assert phonemizer().phonemes_with(c.text, c.phonemes) == list("həlˈoʊ")


def test_unknown_phoneme_symbol_is_bad_request_naming_it() -> None:
    (c,) = ssml("<speak><phoneme ph='he☃lo'>hello</phoneme></speak>")
    with pytest.raises(ProtocolError) as exc:
        phonemizer().phonemes_with(c.text, c.phonemes)
    assert exc.value.code == ErrorCode.BAD_REQUEST
    assert "'☃'" in exc.value.message and "U+2603" in exc.value.message


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "code"),
    [
        ("<speak></speak>", ErrorCode.EMPTY_TEXT),
        ("<speak><break time='1s'/>  <mark name='m'/></speak>", ErrorCode.EMPTY_TEXT),
        ("<speak>... !</speak>", ErrorCode.EMPTY_TEXT),
        ("<speak>这是中文文本，不是英文。</speak>", ErrorCode.UNSUPPORTED_TEXT),
        ("<speak>unclosed", ErrorCode.BAD_REQUEST),
        ("<speak>" + "a" * 20000 + "</speak>", ErrorCode.TEXT_TOO_LONG),
    ],
)
def test_refusals(src: str, code: str) -> None:
    with pytest.raises(ProtocolError) as exc:
        ssml(src)
    assert exc.value.code == code


def test_mark_type_is_exported() -> None:
    assert ClauseMark("a", 0).position == 0


def test_nested_prosody_the_innermost_factor_applies() -> None:
    clauses = ssml(
        "<speak><prosody rate='slow' volume='soft'>a <prosody rate='slow'>b</prosody> c"
        "</prosody> d</speak>"
    )
    assert [c.text for c in clauses] == ["a", "b", "c", "d"]
    assert [c.speed for c in clauses] == pytest.approx([0.75, 0.5625, 0.75, 1.0])
    assert [c.volume for c in clauses] == pytest.approx([0.5, 0.5, 0.5, 1.0])


def test_many_elements_stay_cheap() -> None:
    """Segments × elements must not be quadratic (a big max_text_chars allows many)."""
    import time

    big = FrontendLimits(max_chars=1_000_000, sentence_chars=400)
    unit = "<say-as interpret-as='digits'>7</say-as><break time='1ms'/><phoneme ph='a'>a</phoneme> "
    small = "<speak>" + unit * 200 + "</speak>"
    large = "<speak>" + unit * 2000 + "</speak>"
    t0 = time.perf_counter()
    prepare(small, "en_US", big, text_format="ssml")
    t_small = time.perf_counter() - t0
    t0 = time.perf_counter()
    clauses = prepare(large, "en_US", big, text_format="ssml")
    t_large = time.perf_counter() - t0
    # One sentence of 2 000 "seven a": cut by length, every break spliced in where it was.
    assert all(len(c.text) <= 400 for c in clauses)
    spliced = [p.ms for c in clauses for p in c.pauses]
    edges = sum(c.pause_before_ms + c.pause_after_ms for c in clauses)
    assert sum(spliced) + edges == 2000
    assert t_large < 30 * t_small  # 10× the elements; quadratic would be ~100×
