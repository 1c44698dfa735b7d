"""Word timings through the real daemon (protocol v1 ``word_timings``): written words in
order, times that match the audio, speed and SSML, and against a speech recogniser.

Zero noise, so the same text gives the same audio."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest
import soxr
from pocketsphinx import Decoder

from appliance.clients.client import Client
from tests.asr import ASR_RATE
from tests.conftest import Daemon

RATE = 22050
FRAME_MS = 256 / RATE * 1000
ZERO = {"noise_scale": 0.0, "noise_w": 0.0, "format": "f32le"}
LONG = (
    "When the committee finally gathered in the old library on Thursday evening, nobody "
    "expected the treasurer to announce that the whole budget had been spent on lanterns."
)


def run(daemon: Daemon, text: str, **opts: Any) -> tuple[np.ndarray, list[dict[str, Any]]]:
    with Client(daemon.socket) as c:
        events = list(c.synthesize(text, word_timings=True, **{**ZERO, **opts}))
    assert events[-1]["event"] == "end", events[-1]
    chunks = [e for e in events if e["event"] == "chunk"]
    audio = np.concatenate([np.frombuffer(e["audio"], dtype="<f4") for e in chunks])
    return audio, chunks


def words_of(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for c in chunks:
        assert "words" in c, c.keys()  # every chunk carries the list, empty or not
        for w in c["words"]:  # each word in the chunk where its sound starts
            assert c["offset_ms"] - 1e-6 <= w["offset_ms"] < c["offset_ms"] + c["duration_ms"]
    return [w for c in chunks for w in c["words"]]


def tokens(text: str) -> list[tuple[int, int]]:
    """The source's written words: whitespace-separated, with a letter or digit."""
    return [m.span() for m in re.finditer(r"\S+", text) if any(ch.isalnum() for ch in m.group())]


def assert_tiles(
    words: list[dict[str, Any]],
    toks: list[tuple[int, int]],
    text: str,
    together: tuple[str, ...] = (),
) -> None:
    """Each word's span is one whole token (or the tokens normalised together, ``together``);
    in order, all of them."""
    spans = [tuple(w["text_span"]) for w in words]
    covered: list[tuple[int, int]] = []
    for a, b in spans:
        inside = [t for t in toks if a <= t[0] and t[1] <= b]
        assert inside and inside[0][0] == a and inside[-1][1] == b, (a, b)
        assert len(inside) == 1 or text[a:b] in together, text[a:b]
        covered += inside
    assert covered == toks


def assert_timed(words: list[dict[str, Any]], audio_ms: float) -> None:
    offsets = [w["offset_ms"] for w in words]
    assert all(a < b for a, b in itertools.pairwise(offsets)), offsets
    ends = [w["offset_ms"] + w["duration_ms"] for w in words]
    gaps = [nxt - end for end, nxt in zip(ends, offsets[1:], strict=False)]
    assert all(w["duration_ms"] >= FRAME_MS for w in words)
    assert min(gaps) >= -1e-6  # no two words sound at once
    # Words plus the pauses between and around them are the audio, to a frame.
    lead, tail = offsets[0], audio_ms - ends[-1]
    assert 0 <= lead < 200 and 0 <= tail < 400, (lead, tail)
    total = sum(w["duration_ms"] for w in words) + sum(gaps) + lead + tail
    assert abs(total - audio_ms) <= FRAME_MS


def test_off_by_default_and_the_audio_is_the_same(daemon: Daemon) -> None:
    text = "It costs $49.95 today, Dr. Smith."
    with Client(daemon.socket) as c:
        plain = [e for e in c.synthesize(text, **ZERO) if e["event"] == "chunk"]
    assert all("words" not in e for e in plain)
    _, timed = run(daemon, text)
    assert [e["audio"] for e in timed] == [e["audio"] for e in plain]
    assert [e["text_span"] for e in timed] == [e["text_span"] for e in plain]


@pytest.mark.parametrize(
    "text",
    [
        "It costs $49.95 today, Dr. Smith. The twenty-six items at 3:45 p.m. Hello — world!",
        LONG,  # a quick start: its first words from the quick encoding
        "Short one. " + LONG + " And then one more sentence to end it.",
    ],
)
def test_plain_text_words_tile_the_text_and_match_the_audio(daemon: Daemon, text: str) -> None:
    audio, chunks = run(daemon, text)
    words = words_of(chunks)
    assert_tiles(words, tokens(text), text, ("3:45 p.m.",))
    assert_timed(words, len(audio) / RATE * 1000)
    spans = [text[a:b] for a, b in (w["text_span"] for w in words)]
    if "$49.95" in text:  # one written word, however many spoken
        assert "$49.95" in spans and "3:45 p.m." in spans and "—" not in spans


def test_each_word_is_where_the_voice_is_loud(daemon: Daemon) -> None:
    """Inside a word the audio is speech; in the long pauses between sentences it is not."""
    text = "First sentence here. Second sentence follows. And a third."
    audio, chunks = run(daemon, text, mode="sentence")
    words = words_of(chunks)
    for w in words:
        a = round(w["offset_ms"] * RATE / 1000)
        b = round((w["offset_ms"] + w["duration_ms"]) * RATE / 1000)
        assert np.sqrt(np.mean(audio[a:b] ** 2)) > 0.01
    for w, nxt in itertools.pairwise(words):
        gap = nxt["offset_ms"] - (w["offset_ms"] + w["duration_ms"])
        if text[w["text_span"][1] - 1] == ".":  # a sentence's end: the voice's pause
            assert gap > 100, gap


@pytest.mark.parametrize(
    "text",
    [
        "It costs $49.95 today, Dr. Smith, and the museum opens at nine.",
        "Good morning, Dr. Smith. Your train leaves at 3:45 p.m. from platform two.",
    ],
)
def test_speed_2_halves_the_offsets(daemon: Daemon, text: str) -> None:
    """``speed: 2`` is half the audio, to a frame per clause (the voice re-timed to 1.25×,
    libsonic the rest), and every word within a frame of half its speed-1 offset: the
    re-timing starts each word where the rate puts it (appliance.model.retime), and the
    words of a clause count what libsonic still holds of the one before.  Deterministic:
    no quick start, whose first words are a quick encoding's, timed as that sounds."""
    a1, c1 = run(daemon, text, deterministic=True)
    a2, c2 = run(daemon, text, speed=2.0, deterministic=True)
    w1, w2 = words_of(c1), words_of(c2)
    assert [w["text_span"] for w in w1] == [w["text_span"] for w in w2]
    assert abs(len(a2) - len(a1) / 2) <= 2 * 256 + 0.004 * len(a1), len(a2) / len(a1)
    errors = [abs(y["offset_ms"] - x["offset_ms"] / 2) for x, y in zip(w1, w2, strict=True)]
    assert max(errors) <= FRAME_MS, errors
    assert float(np.median(errors)) <= 0.5 * FRAME_MS, errors
    assert_timed(w2, len(a2) / RATE * 1000)


def longest_zeros(x: np.ndarray) -> int:
    best = run = 0
    for z in (x == 0.0).tolist():
        run = run + 1 if z else 0
        best = max(best, run)
    return best


SSML = (
    "<speak>Visit the <sub alias='World Wide Web'>WWW</sub> site now, "
    "<break time='700ms'/> or <prosody rate='slow'>later tonight</prosody>. "
    "<s>Costs are $5.</s></speak>"
)


def test_ssml_words_point_at_the_source_and_breaks_are_pauses(daemon: Daemon) -> None:
    audio, chunks = run(daemon, SSML, text_format="ssml")
    words = words_of(chunks)
    spans = [SSML[a:b] for a, b in (w["text_span"] for w in words)]
    assert spans == ["Visit", "the", "WWW", "site", "now,", "or", "later", "tonight", "Costs",
                     "are", "$5."]  # fmt: skip
    assert_timed(words, len(audio) / RATE * 1000)
    now, orr = words[4], words[5]
    gap_a = now["offset_ms"] + now["duration_ms"]
    assert orr["offset_ms"] - gap_a >= 700  # the break is in the pause
    gap = audio[round(gap_a * RATE / 1000) : round(orr["offset_ms"] * RATE / 1000)]
    assert longest_zeros(gap) >= 0.7 * RATE  # the break's silence, whole, between the two
    # <prosody rate="slow"> lengthens its words.
    _, plain = run(daemon, "<speak>later tonight.</speak>", text_format="ssml")
    assert words[7]["duration_ms"] > 1.2 * words_of(plain)[1]["duration_ms"]


MARKDOWN = (
    "## Weather today\n\n**Sure!** It is *sunny* in [the park](https://example.com).\n\n"
    "- Bring `water`\n"
)


def test_markdown_words_point_at_the_source_without_its_markup(daemon: Daemon) -> None:
    audio, chunks = run(daemon, MARKDOWN, text_format="markdown")
    words = words_of(chunks)
    spans = [MARKDOWN[a:b] for a, b in (w["text_span"] for w in words)]
    # The words as written in the source, none of the markup's characters on its own.
    assert [s.strip("*#`[]().,!") for s in spans] == [
        "Weather", "today", "Sure", "It", "is", "sunny", "in", "the", "park", "Bring", "water",
    ]  # fmt: skip
    assert not any(s in {"##", "**", "-", "`"} for s in spans)
    assert_timed(words, len(audio) / RATE * 1000)


def test_speak_and_text_streams_take_the_field(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        ts = c.text_stream(word_timings=True, **ZERO)
        ts.append("Hello there, ")
        ts.append("general Kenobi.", flush=True)
        ts.finish()
        events = list(ts.events())
    chunks = [e for e in events if e["event"] == "chunk"]
    text = "Hello there, general Kenobi."
    assert_tiles(words_of(chunks), tokens(text), text)


# --- against a speech recogniser -------------------------------------------------------------

HELD_OUT = [
    "Please remember to water the garden before the evening storm arrives.",
    "The museum opens at nine and closes after the last visitors leave.",
    "Several engineers reviewed the bridge design during a long meeting yesterday.",
    "A small yellow boat drifted slowly across the quiet northern lake.",
]


def recogniser_starts(audio: np.ndarray) -> list[tuple[str, float]]:
    """pocketsphinx's word segmentation: (word, start ms), fillers left out."""
    pcm = soxr.resample(audio, RATE, ASR_RATE)
    decoder = Decoder(samprate=ASR_RATE)
    decoder.start_utt()
    decoder.process_raw((np.clip(pcm, -1, 1) * 32767).astype(np.int16).tobytes(), full_utt=True)
    decoder.end_utt()
    out = []
    for seg in decoder.seg():
        word = re.sub(r"\(\d+\)$", "", seg.word)
        if not word.startswith("<") and not word.startswith("["):
            out.append((word, seg.start_frame * 10.0))  # 100 frames a second
    return out


def test_offsets_agree_with_a_recogniser(daemon: Daemon) -> None:
    """Median |offset − recogniser's start| ≤ 40 ms over the words both agree on."""
    errors: list[float] = []
    for text in HELD_OUT:
        audio, chunks = run(daemon, text)
        heard = recogniser_starts(audio)
        j = 0
        for w in words_of(chunks):
            written = text[w["text_span"][0] : w["text_span"][1]].lower().strip(".,")
            for k in range(j, len(heard)):
                if heard[k][0] == written:
                    errors.append(w["offset_ms"] - heard[k][1])
                    j = k + 1
                    break
    assert len(errors) >= 20, errors  # the recogniser agreed on most words
    assert float(np.median(np.abs(errors))) <= 40.0, sorted(errors)


def test_the_bench_measures_the_first_packets_word_work(daemon: Daemon) -> None:
    """``make bench``'s cost measure (issue 29) over the real socket: pairs of first packets
    without and with word timings, each request cancelled at its first chunk, and the word
    work the daemon says each timed first packet waited for."""
    from bench.wordtimes import socket_cost

    row = socket_cost(daemon.socket, {"short": "Turn on the kitchen lights, please."}, 3)["short"]
    assert row["pairs"] == 3  # a short command never gets a quick start: every pair counts
    assert 0 < row["off_p50"] < 10_000 and 0 < row["on_p50"] < 10_000, row
    assert 0 < row["words_p50"] <= row["words_max"] < 1000, row
    with Client(daemon.socket) as c:  # the cancelled requests left the daemon serving
        assert len(c.synthesize_all("Done.").audio) > 0
