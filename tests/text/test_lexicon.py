"""The user lexicon: file format, matching, symbol checks, config key and check-config."""

from __future__ import annotations

import json
import os
import threading
from functools import cache
from pathlib import Path

import pytest

from appliance.main import main as ttsd_main
from appliance.model.voices import VoiceInfo, bundled_voice_path
from appliance.ops.config import ConfigError, parse_config
from appliance.text.frontend import FrontendLimits, prepare
from appliance.text.lexicon import (
    Lexicon,
    LexiconError,
    load_checked,
    max_pronunciation_chars,
)
from appliance.text.phonemize import Phonemizer
from appliance.text.report import phoneme_report

LIMITS = FrontendLimits(max_chars=20000, sentence_chars=400)
TTSD_IPA = "tˌiːtˌiːˌɛsdˈiː"


@cache
def voice() -> VoiceInfo:
    path = bundled_voice_path()
    cfg = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
    return VoiceInfo.from_config("en_US-joe-medium", cfg)


def lex(data: object) -> Lexicon:
    return Lexicon.parse(data, "test.yaml")


LEX = lex(
    {
        "en": {
            "ttsd": {"ipa": TTSD_IPA},
            "Nguyen": "win",
            "New  York": {"say": "noo york"},
            "two": {"say": "deux"},
        },
        "en_GB": {"Nguyen": "nwen"},
    }
)


def said(text: str, language: str = "en_US", lexicon: Lexicon | None = LEX) -> list[str]:
    return [c.text for c in prepare(text, language, LIMITS, lexicon=lexicon)]


# --- matching ---------------------------------------------------------------------------------


def test_respelling_changes_that_word_and_no_other() -> None:
    assert said("Mr Nguyen met nguyen and NGUYEN at Nguyenville.") == [
        "Mister win met win and win at Nguyenville."
    ]


def test_without_a_lexicon_nothing_changes() -> None:
    assert said("Nguyen.", lexicon=None) == ["Nguyen."]


def test_phrases_match_across_whitespace_longest_first() -> None:
    assert said("I love new\tyork, and New York.") == ["I love noo york, and noo york."]


def test_matches_after_normalisation() -> None:
    assert said("Take 2 apples.") == ["Take deux apples."]


def test_dialect_entries_override_the_family() -> None:
    assert said("Nguyen.", "en_GB") == ["nwen."]
    assert said("Nguyen.", "en_US") == ["win."]
    assert said("Nguyen.", "de_DE") == ["Nguyen."]


def test_spans_still_point_at_the_original_word() -> None:
    text = "Hello Nguyen."
    (c,) = prepare(text, "en_US", LIMITS, lexicon=LEX)
    assert [text[a:b] for a, b in c.word_spans] == ["Hello", "Nguyen."]


def test_ipa_entry_overrides_the_phonemes_of_that_word_only() -> None:
    (c,) = prepare("Run ttsd today, not ttsdx.", "en_US", LIMITS, lexicon=LEX)
    (o,) = c.phonemes
    assert c.text[o.start : o.end] == "ttsd"
    assert o.ipa == TTSD_IPA
    ph = Phonemizer(voice())
    with_lex = ph.phonemes_with(c.text, c.phonemes)
    plain = ph.phonemes(c.text)
    words_with = "".join(with_lex).split(" ")
    words_plain = "".join(plain).split(" ")
    assert words_with[1] == TTSD_IPA != words_plain[1]
    # Every other word keeps espeak's phonemes (the last keeps its punctuation).
    assert [w for k, w in enumerate(words_with) if k != 1] == [
        w for k, w in enumerate(words_plain) if k != 1
    ]


def test_ssml_phoneme_element_wins_over_the_lexicon() -> None:
    (c,) = prepare(
        "<speak><phoneme ph='tiː'>ttsd</phoneme> and ttsd</speak>",
        "en_US",
        LIMITS,
        text_format="ssml",
        lexicon=LEX,
    )
    assert [(c.text[o.start : o.end], o.ipa) for o in c.phonemes] == [
        ("ttsd", "tiː"),
        ("ttsd", TTSD_IPA),
    ]


# --- the file ---------------------------------------------------------------------------------


def test_check_voices_names_the_unknown_symbol() -> None:
    bad = lex({"en": {"snowman": {"ipa": "sn☃"}}})
    with pytest.raises(LexiconError) as exc:
        bad.check_voices([(voice().name, voice().language, voice().phoneme_id_map)])
    msg = str(exc.value)
    assert "'snowman'" in msg and "'☃'" in msg and "U+2603" in msg and "en_US-joe-medium" in msg


def test_check_voices_only_checks_the_voices_language() -> None:
    other = lex({"de": {"schnee": {"ipa": "☃"}}})
    other.check_voices([(voice().name, voice().language, voice().phoneme_id_map)])


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ([1, 2], "expected a mapping"),
        ({"English": {"a": "b"}}, "not a language"),
        ({"en": ["a"]}, "expected a mapping of word"),
        ({"en": {"": "b"}}, "non-empty"),
        ({"en": {"a": ""}}, "non-empty"),
        ({"en": {"a": {"ipa": "x", "say": "y"}}}, "expected a respelling"),
        ({"en": {"a": {"sound": "x"}}}, "expected a respelling"),
        ({"en": {"a": 3}}, "expected a respelling"),
        ({"en": {"-a": "b"}}, "start and end with a letter"),
        ({"en": {"a": "<speak>b</speak>"}}, "plain text"),
        ({"en": {"a": "x" * 300}}, "longer than"),
        # "a" → 198 characters made a 40-character request cost gigabytes in the encoder.
        ({"en": {"a": "x" * 198}}, "longer than 28 characters"),
        ({"en": {"a": {"ipa": "ə" * 29}}}, "longer than 28 characters"),
        ({"en": {"WWW": "x" * 37}}, "longer than 36 characters"),
        ({"en": {f"w{i}": "x" for i in range(10_001)}}, "more than 10000"),
    ],
)
def test_bad_lexicon_data(data: object, words: str) -> None:
    with pytest.raises(LexiconError) as exc:
        lex(data)
    assert words in str(exc.value)


def test_load_file(tmp_path: Path) -> None:
    f = tmp_path / "lex.yaml"
    f.write_text(f'en:\n  ttsd: {{ipa: "{TTSD_IPA}"}}\n  Nguyen: win\n', encoding="utf-8")
    lexicon = load_checked(f, [voice()])
    assert len(lexicon) == 2
    assert lexicon.source == str(f)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"en: [unclosed\n", "not valid YAML"),
        (b"en:\n  a: b\n\xff\xfe", "not UTF-8 (byte 0xff at offset 11, line 3)"),
        (b"en:\n  a: b\n" + b"#" * (1 << 20), "larger than"),
    ],
)
def test_load_bad_file(tmp_path: Path, content: bytes, words: str) -> None:
    f = tmp_path / "lex.yaml"
    f.write_bytes(content)
    with pytest.raises(LexiconError) as exc:
        Lexicon.load(f)
    assert words in str(exc.value)


def test_pronunciations_are_bounded_by_their_phrase() -> None:
    assert max_pronunciation_chars("a") == 28
    ok = lex({"en": {"a": "x" * 28, "WWW": {"ipa": "dˈʌbəljuː dˈʌbəljuː dˈʌbəljuː"}}})
    assert len(ok) == 2
    assert max_pronunciation_chars("x" * 200) == 200


def test_load_nested_too_deep_is_one_line(tmp_path: Path) -> None:
    # 5 000 levels were a RecursionError traceback at start and a lost task on SIGHUP.
    f = tmp_path / "lex.yaml"
    f.write_text("en:\n  a:\n    " + "- " * 5000 + "x\n")
    with pytest.raises(LexiconError) as exc:
        Lexicon.load(f)
    message = str(exc.value)
    assert message.startswith(f"{f}: nested deeper than") and "(line " in message
    assert "\n" not in message
    f.write_text("en: {a: " + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(LexiconError, match="nested deeper than"):
        Lexicon.load(f)


def test_yaml_errors_are_one_line(tmp_path: Path) -> None:
    f = tmp_path / "lex.yaml"
    f.write_text("en:\n  a: b\n    c: d\n")
    with pytest.raises(LexiconError) as exc:
        Lexicon.load(f)
    assert str(exc.value) == f"{f}: not valid YAML: mapping values are not allowed here" + (
        " (line 3, column 6)"
    )


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    """Opening a FIFO waits for a writer: a lexicon path that is one wedged reloads."""
    fifo = tmp_path / "lex.yaml"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def load() -> None:
        try:
            Lexicon.load(fifo)
        except LexiconError as exc:
            result.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout=5)
    if thread.is_alive():  # let the stuck open go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert result and "not a regular file" in str(result[0])
    with pytest.raises(LexiconError, match="not a regular file"):
        Lexicon.load("/dev/zero")


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LexiconError, match="cannot read"):
        Lexicon.load(tmp_path / "nope.yaml")


# --- config and check-config ------------------------------------------------------------------


def test_config_key() -> None:
    assert parse_config({}).voices.lexicon is None
    assert parse_config({"voices": {"lexicon": "/etc/ttsd/lexicon.yaml"}}).voices.lexicon
    for bad in ("", "  ", "a\0b", 3):
        with pytest.raises(ConfigError, match=r"voices\.lexicon"):
            parse_config({"voices": {"lexicon": bad}})


def test_check_config_validates_the_lexicon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(f'en:\n  ttsd: {{ipa: "{TTSD_IPA}"}}\n', encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text('en:\n  ttsd: {ipa: "t☃"}\n', encoding="utf-8")
    for lexicon, rc in ((good, 0), (bad, 1), (tmp_path / "missing.yaml", 1)):
        cfg = tmp_path / "config.yaml"
        cfg.write_text(f"voices:\n  lexicon: {lexicon}\n", encoding="utf-8")
        assert ttsd_main(["check-config", str(cfg)]) == rc
    err = capsys.readouterr().err
    assert "'☃'" in err and "missing.yaml: cannot read" in err


def test_phoneme_report_keeps_words_and_phonemes_together_around_a_symbol() -> None:
    """espeak says "→" as two words and "•" as none: the counts agreed, and each word got
    the phonemes of the one before (right arrow's under "ok")."""
    phonemizer = Phonemizer(voice())
    (clause,) = phoneme_report(prepare("… → ok •", "en_US", LIMITS), phonemizer)
    words = {w["text"]: w["phonemes"] for w in clause["words"]}
    alone = {w: "".join(phonemizer.phonemes_with(w, ())) for w in ("→", "ok")}
    assert words == {"→": alone["→"], "ok": alone["ok"], "•": ""}
    assert len(words["→"].split()) == 2
    # Plain words are still paired in context.
    (plain,) = phoneme_report(prepare("Hello, world.", "en_US", LIMITS), phonemizer)
    assert [w["phonemes"] for w in plain["words"]] == plain["phonemes"].split()
