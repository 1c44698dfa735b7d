"""SSML through the real daemon: breaks, prosody, marks, phoneme input, ASR, bad input.

Every request uses zero noise, so the same text gives the same audio and two renderings
can be compared sample for sample.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr

from appliance.clients.client import Client, TtsdError
from tests.asr import ASR_RATE, _decoder, recognize, word_errors
from tests.conftest import Daemon, DaemonFactory

RATE = 22050
ZERO = {"noise_scale": 0.0, "noise_w": 0.0, "format": "f32le"}
WINDOW_MS = 16 * 256 / RATE * 1000  # one decode window (16 frames): the marks' tolerance


def run(daemon: Daemon, text: str, **opts: Any) -> tuple[np.ndarray, list[dict[str, Any]]]:
    with Client(daemon.socket) as c:
        events = list(c.synthesize(text, text_format="ssml", **{**ZERO, **opts}))
    chunks = [e for e in events if e["event"] == "chunk"]
    assert events[-1]["event"] == "end", events[-1]
    audio = np.concatenate([np.frombuffer(e["audio"], dtype="<f4") for e in chunks])
    return audio, chunks


def marks_of(chunks: list[dict[str, Any]]) -> list[tuple[str, float, int]]:
    return [(m["name"], m["offset_ms"], e["seq"]) for e in chunks for m in e.get("marks", [])]


# --- breaks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("attrs", "ms"), [('time="500ms"', 500), ('strength="x-strong"', 1000)])
def test_break_is_exact_silence_at_the_clause_boundary(daemon: Daemon, attrs: str, ms: int) -> None:
    # Baseline: the same clause cut with a zero-length break, so only the silence differs.
    base, base_chunks = run(daemon, '<speak>Hello there. <break time="0ms"/>How are you?</speak>')
    audio, chunks = run(daemon, f"<speak>Hello there. <break {attrs}/>How are you?</speak>")
    n = round(ms * RATE / 1000)
    assert abs((len(audio) - len(base)) - n) <= round(0.012 * RATE)
    # The silence starts where the second clause's first chunk starts, and is all zeros.
    second = next(c for c in chunks if c["text_span"][0] >= len("<speak>Hello there. <break"))
    k = round(second["offset_ms"] * RATE / 1000)
    assert np.all(audio[k : k + n] == 0.0)
    assert abs(audio[k + n : k + n + RATE // 10]).max() > 0.01  # speech right after
    # Around it, the same speech as without the break.
    np.testing.assert_allclose(audio[:k], base[:k], atol=2e-3)
    np.testing.assert_allclose(audio[k + n :], base[k:], atol=2e-3)
    assert len(chunks) == len(base_chunks)


def test_trailing_and_leading_breaks(daemon: Daemon) -> None:
    base, _ = run(daemon, "<speak>Ready.</speak>")
    audio, _ = run(daemon, '<speak><break time="250ms"/>Ready.<break time="1s"/></speak>')
    lead, tail = round(0.25 * RATE), RATE
    assert len(audio) == len(base) + lead + tail
    assert np.all(audio[:lead] == 0.0) and np.all(audio[-tail:] == 0.0)


# --- prosody ----------------------------------------------------------------------------------

TEXT = "The committee met on a cold and windy morning to review the proposal."


@pytest.mark.parametrize(
    ("rate", "factor"),
    [("x-slow", 0.5), ("slow", 0.75), ("+20%", 1.2), ("150%", 1.5), ("200%", 2.0)],
)
def test_prosody_rate_changes_duration_by_the_factor(
    daemon: Daemon, rate: str, factor: float
) -> None:
    """Re-timed (appliance.model.retime): 1/rate as long to a frame or two; at 2× some of
    this sentence's phonemes are down to the frame each keeps (measured +2.4 %)."""
    base, _ = run(daemon, f"<speak>{TEXT}</speak>")
    audio, _ = run(daemon, f'<speak><prosody rate="{rate}">{TEXT}</prosody></speak>')
    ratio = len(audio) / len(base)
    assert ratio == pytest.approx(1 / factor, rel=0.01 if factor <= 1.5 else 0.05)


def test_prosody_volume_scales_the_span(daemon: Daemon) -> None:
    base, _ = run(daemon, f"<speak>{TEXT}</speak>")
    audio, _ = run(daemon, f'<speak><prosody volume="x-soft">{TEXT}</prosody></speak>')
    assert len(audio) == len(base)
    np.testing.assert_allclose(audio, base * 0.3, atol=2e-3)


# --- marks ------------------------------------------------------------------------------------

DIGITS = "one two three four five six seven eight nine ten".split()


def asr_word_starts(audio_f32: np.ndarray) -> list[tuple[str, float]]:
    """(word, start ms) as pocketsphinx segments the audio: an independent aligner."""
    pcm = soxr.resample((np.clip(audio_f32, -1, 1) * 32767).astype(np.int16), RATE, ASR_RATE)
    d = _decoder()
    d.start_utt()
    d.process_raw(pcm.astype(np.int16).tobytes(), full_utt=True)
    d.end_utt()
    return [(s.word, s.start_frame * 10.0) for s in d.seg() if not s.word.startswith("<")]


def test_marks_in_order_at_the_word_boundaries(daemon: Daemon) -> None:
    src = "<speak>" + " ".join(f"<mark name='{w}'/>{w}" for w in DIGITS) + ".</speak>"
    audio, chunks = run(daemon, src)
    marks = marks_of(chunks)
    assert [m[0] for m in marks] == DIGITS
    offsets = [m[1] for m in marks]
    assert offsets == sorted(offsets) and offsets[0] == 0.0
    # Each mark is carried by the chunk whose audio it falls in.
    by_seq = {c["seq"]: c for c in chunks}
    for _name, at, seq in marks:
        c = by_seq[seq]
        assert c["offset_ms"] - 1e-3 <= at < c["offset_ms"] + c["duration_ms"]
    # And it is where the listener hears the word begin.
    heard = asr_word_starts(audio)
    assert [w for w, _ in heard] == DIGITS, heard
    for (name, at, _), (word, start) in zip(marks[1:], heard[1:], strict=True):
        assert abs(at - start) <= WINDOW_MS, (name, at, word, start)


def test_speech_dispatcher_marks_between_sentences(daemon: Daemon) -> None:
    src = (
        '<speak><mark name="0"/>Good morning. <mark name="1"/>The door is open. '
        '<mark name="2"/>Please close it.<mark name="end"/></speak>'
    )
    audio, chunks = run(daemon, src, mode="sentence")
    marks = marks_of(chunks)
    assert [m[0] for m in marks] == ["0", "1", "2", "end"]
    # One chunk per sentence: each sentence's mark is its chunk's start.
    assert [m[1] for m in marks[:3]] == pytest.approx([c["offset_ms"] for c in chunks])
    assert marks[3][1] == pytest.approx(len(audio) / RATE * 1000, abs=0.1)
    assert marks[3][2] == chunks[-1]["seq"]


def test_mark_before_and_after_a_break(daemon: Daemon) -> None:
    src = '<speak>Wait <mark name="a"/><break time="700ms"/><mark name="b"/>now.</speak>'
    _, chunks = run(daemon, src)
    (a, at_a, _), (b, at_b, _) = marks_of(chunks)
    assert (a, b) == ("a", "b")
    assert at_b - at_a == pytest.approx(700.0, abs=0.1)


def test_plain_text_has_no_marks_and_reads_markup(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        events = list(c.synthesize('<speak><mark name="x"/>Hi</speak>', **ZERO))
    chunks = [e for e in events if e["event"] == "chunk"]
    assert chunks and not any(e.get("marks") for e in chunks)


# --- phoneme input and the ASR round trip -----------------------------------------------------


def heard(audio: np.ndarray) -> str:
    return recognize((np.clip(audio, -1, 1) * 32767).astype(np.int16), RATE)


def test_phoneme_input_is_what_is_said(daemon: Daemon) -> None:
    plain, _ = run(daemon, "<speak>one seven three</speak>")
    said, _ = run(daemon, "<speak>one <phoneme ph='tˈuː'>seven</phoneme> three</speak>")
    assert "seven" in heard(plain).split()
    assert heard(said).split() == ["one", "two", "three"]


SAMPLES = [
    # (SSML, what a listener should hear)
    (
        "<speak>Your code is <say-as interpret-as='digits'>4071</say-as>.</speak>",
        "your code is four zero seven one",
    ),
    (
        "<speak><s>The <say-as interpret-as='ordinal'>3</say-as> door.</s>"
        "<s>It is <say-as interpret-as='cardinal'>25</say-as> metres away.</s></speak>",
        "the third door it is twenty five metres away",
    ),
    (
        "<speak>Please <break time='300ms'/>turn <sub alias='left'>L</sub> now.</speak>",
        "please turn left now",
    ),
    (
        "<speak><p>Good morning.</p><p><prosody rate='slow'>It is sunny today.</prosody></p>"
        "</speak>",
        "good morning it is sunny today",
    ),
]


def test_asr_round_trip_as_good_as_the_plain_text(daemon: Daemon) -> None:
    ssml_err = plain_err = total = 0
    for src, ref in SAMPLES:
        audio, _ = run(daemon, src)
        with Client(daemon.socket) as c:
            plain = c.synthesize_all(ref, **ZERO)
        plain_audio = np.frombuffer(plain.audio, dtype="<f4")
        e1, n = word_errors(ref, heard(audio))
        e2, _ = word_errors(ref, heard(plain_audio))
        ssml_err += e1
        plain_err += e2
        total += n
    assert ssml_err / total <= plain_err / total + 0.05, (ssml_err, plain_err, total)
    assert ssml_err / total < 0.3


def test_text_spans_index_the_ssml_source(daemon: Daemon) -> None:
    src = "<speak>Caf&#233; <emphasis>time</emphasis> <sub alias='now'>NOW</sub>.</speak>"
    _, chunks = run(daemon, src, mode="sentence")
    a = min(c["text_span"][0] for c in chunks)
    b = max(c["text_span"][1] for c in chunks)
    assert src[a:b].startswith("Caf&#233;") and src[a:b].endswith("NOW</sub>.")


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "code", "words"),
    [
        ("<speak><s>Hello", "bad_request", "line 1, column 16"),
        (
            '<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]><speak>&x;</speak>',
            "bad_request",
            "DOCTYPE",
        ),
        ("<speak>" + "<s>" * 40 + "x" + "</s>" * 40 + "</speak>", "bad_request", "deeper"),
        ("<speak><phoneme ph='t☃'>x</phoneme></speak>", "bad_request", "U+2603"),
        ("<speak><audio src='/dev/zero'/></speak>", "empty_text", "nothing to speak"),
        ("<speak><prosody rate='warp'>x</prosody></speak>", "bad_request", "rate"),
    ],
)
def test_bad_ssml_is_refused_before_start_and_the_daemon_goes_on(
    daemon: Daemon, src: str, code: str, words: str
) -> None:
    with Client(daemon.socket) as c:
        rid = c.next_id()
        c.send({"op": "synthesize", "id": rid, "text": src, "text_format": "ssml"})
        seen: list[dict[str, Any]] = []
        with pytest.raises(TtsdError) as exc:
            seen.extend(c.events(rid))
        assert seen == []  # refused before start
        assert exc.value.code == code and words in str(exc.value)
        assert c.ping()


def test_ssml_with_text_stream_is_refused(daemon: Daemon) -> None:
    with Client(daemon.socket) as c, pytest.raises(TtsdError) as exc:
        list(c.synthesize("<speak>", text_format="ssml", text_stream=True))
    assert exc.value.code == "bad_request"


# --- the lexicon through the daemon, reloaded on SIGHUP ----------------------------------------


def words_said(daemon: Daemon, text: str) -> dict[str, str]:
    with Client(daemon.socket) as c:
        reply = c.request("phonemes", text=text)
    return {w["text"]: w["phonemes"] for cl in reply["clauses"] for w in cl["words"]}


def test_lexicon_entry_and_sighup_reload(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    lex = tmp_path / "lexicon.yaml"
    lex.write_text('en:\n  ttsd: {ipa: "tˈiːtiːˌɛsdˈiː"}\n', encoding="utf-8")
    d = daemon_factory({"voices": {"lexicon": str(lex)}})
    text = "Start ttsd on the box."
    before = words_said(d, text)
    assert before["ttsd"] == "tˈiːtiːˌɛsdˈiː"
    lex.write_text('en:\n  ttsd: {ipa: "tˈiːdiː"}\n  box: {say: "machine"}\n', encoding="utf-8")
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "lexicon: 2 entries" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    after = words_said(d, text)
    assert after["ttsd"] == "tˈiːdiː"
    assert "machine." in after and "box." not in after
    # No other word changed.
    assert {k: v for k, v in after.items() if k not in ("ttsd", "machine.")} == {
        k: v for k, v in before.items() if k not in ("ttsd", "box.")
    }
    # A broken file on reload is refused and the last good lexicon stays.
    lex.write_text('en:\n  ttsd: {ipa: "t☃"}\n', encoding="utf-8")
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "lexicon reload refused" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "U+2603" in d.log()
    assert words_said(d, text)["ttsd"] == "tˈiːdiː"


def test_lexicon_changes_the_audio_of_that_word(
    daemon: Daemon, daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    lex = tmp_path / "lexicon.yaml"
    lex.write_text('en:\n  seven: {ipa: "tˈuː"}\n', encoding="utf-8")
    d = daemon_factory({"voices": {"lexicon": str(lex)}})
    with Client(d.socket) as c:
        with_lex = np.frombuffer(c.synthesize_all("one seven three", **ZERO).audio, dtype="<f4")
    assert heard(with_lex).split() == ["one", "two", "three"]
    assert words_said(daemon, "seven")["seven"] != "tˈuː"


def test_ttsctl_phonemes_prints_words(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.clients.ctl import main as ttsctl

    assert ttsctl(["--socket", daemon.socket, "phonemes", "Hello 2 cats."]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [w for w, _ in lines] == ["Hello", "two", "cats."]
    assert lines[0][1] == "həlˈoʊ"
    ssml = "<speak><phoneme ph='wˈʌn'>seven</phoneme></speak>"
    assert ttsctl(["--socket", daemon.socket, "phonemes", "--ssml", ssml]) == 0
    assert capsys.readouterr().out.split() == ["seven", "wˈʌn"]
    assert ttsctl(["--socket", daemon.socket, "phonemes", "--ssml", "<speak>"]) == 1
    assert "bad_request" in capsys.readouterr().err
