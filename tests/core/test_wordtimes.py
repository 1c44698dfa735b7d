"""Word timings without a model: spoken words from ids, written words from clause spans,
times from a frame map, what was heard (appliance.core.wordtimes)."""

from __future__ import annotations

import itertools
import json
import re
from functools import cache

import numpy as np
import pytest

from appliance.core.wordtimes import (
    FrameSums,
    WrittenWord,
    spoken_words,
    timed_words,
    written_words,
)
from appliance.model.voices import VoiceInfo, bundled_voice_path
from appliance.playback.speak import heard_span
from appliance.speech import Word
from appliance.text.frontend import FrontendLimits, prepare
from appliance.text.phonemize import IdKinds, Phonemizer

LIMITS = FrontendLimits(max_chars=20000, sentence_chars=400)
SPACE, PAD, COMMA = 3, 0, 8
KINDS = IdKinds.of(64, space={SPACE}, silent={SPACE, PAD, COMMA}, pad={PAD})


@cache
def phonemizer() -> Phonemizer:
    path = bundled_voice_path()
    cfg = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
    return Phonemizer(VoiceInfo.from_config("en_US-joe-medium", cfg))


def test_spoken_words_are_the_sounding_ids_between_gaps_with_their_lead_pad() -> None:
    #       0   1   2   3    4      5      6   7      8      9      10  11
    ids = [PAD, 20, 21, PAD, COMMA, SPACE, 22, SPACE, SPACE, COMMA, 23, PAD]
    assert spoken_words(ids, KINDS) == [(0, 3), (6, 7), (10, 11)]
    ids = [SPACE, PAD, 20, PAD, SPACE, PAD, PAD, 21]
    assert spoken_words(ids, KINDS) == [(1, 3), (6, 8)]


def words_for(text: str) -> list[tuple[str, int, int]]:
    """(written word, start id, end id) with the bundled voice, the ids of each clause after
    those of the clauses before."""
    ph = phonemizer()
    out = []
    base = 0
    for c in prepare(text, "en_US", LIMITS):
        ids = ph.ids(c.text).tolist()
        for w in written_words(c.text, c.word_spans, ids, ph.kinds, ph.word_size):
            out.append((text[w.span[0] : w.span[1]], base + w.start, base + w.end))
        base += len(ids)
    return out


def test_one_written_token_said_as_many_words_is_one_entry() -> None:
    text = "It costs $49.95 today."
    (c,) = prepare(text, "en_US", LIMITS)
    assert len(c.text.split()) > 4  # normalised to several spoken words
    words = words_for(text)
    assert [w for w, _, _ in words] == ["It", "costs", "$49.95", "today."]
    ph = phonemizer()
    ids = ph.ids(c.text).tolist()
    spoken = spoken_words(ids, ph.kinds)
    assert (words[2][1], words[2][2]) == (spoken[2][0], spoken[6][1])  # five spoken words


def test_tokens_with_nothing_to_say_are_not_words() -> None:
    text = "Hello — world - again."
    assert [w for w, _, _ in words_for(text)] == ["Hello", "world", "again."]


def test_words_espeak_runs_together_are_still_one_entry_each() -> None:
    """espeak says "in the", "that the", "had been" as one word each: the text's tokens
    split those words' ids, in order, without a gap or an overlap."""
    text = (
        "When the committee finally gathered in the old library on Thursday evening, "
        "nobody expected that the whole budget had been spent on lanterns."
    )
    words = words_for(text)
    assert [w for w, _, _ in words] == text.split()
    for (_, _, end), (_, start, _) in itertools.pairwise(words):
        assert end <= start
    assert all(a < b for _, a, b in words)


def test_a_count_espeak_disagrees_with_still_tiles_in_order() -> None:
    text = "one two three four"
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    for n_spoken in (2, 3, 5, 7):
        ids = []
        for k in range(n_spoken):
            ids += [SPACE, PAD, 20 + k, PAD, 30 + k]
        spoken = spoken_words(ids, KINDS)
        assert len(spoken) == n_spoken
        words = written_words(text, spans, ids, KINDS)
        assert words[0].start == spoken[0][0] and words[-1].end == spoken[-1][1]
        for w, nxt in itertools.pairwise(words):
            assert w.end <= nxt.start and w.span[1] <= nxt.span[0]
        covered = [s for w in words for s in spans if w.span[0] <= s[0] and s[1] <= w.span[1]]
        assert covered == spans


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "It costs $49.95 today, Dr. Smith, and 3:45 p.m. is late.",
    "On 2024-01-05 the 1st, 2nd and 3rd runners got 50% more; NASA's JSON-RPC v2.0 helped.",
    "I can't say whether it's twenty-six or twenty-seven, e.g. maybe U.S.A. or U.K.",
    "Mr. Jones paid £12 for 3 kg of apples at 10:30 a.m. on Jan. 3rd, 1999.",
]


@pytest.mark.parametrize("text", SENTENCES)
def test_written_words_in_order_without_overlap(text: str) -> None:
    words = words_for(text)
    voiced = [t for t in text.split() if any(c.isalnum() for c in t)]
    assert " ".join(w for w, _, _ in words) == " ".join(voiced)  # whole tokens, all, in order
    merged = [w for w, _, _ in words if " " in w]
    normalised_together = ("3:45 p.m.", "3 kg", "10:30 a.m.", "Jan. 3rd, 1999.")
    assert merged == [m for m in normalised_together if m in text]
    assert all(a < b for _, a, b in words)
    for (_, _, end), (_, start, _) in itertools.pairwise(words):
        assert end <= start


def test_times_come_from_the_id_map() -> None:
    words = [WrittenWord((0, 2), 1, 3), WrittenWord((3, 9), 6, 11)]

    def at(p: int, start: bool) -> float:  # 100 ms of pause at id 6, before a word there
        return p * 10.0 + (100.0 if p > 6 or (p == 6 and start) else 0.0)

    assert timed_words(words, at) == [Word((0, 2), 10.0, 20.0), Word((3, 9), 160.0, 50.0)]


@pytest.mark.parametrize("step", [1, 2])  # the model's array, or a strided view of one
def test_frame_sums_are_the_running_sums_read_as_far_as_asked(step: int) -> None:
    rng = np.random.default_rng(29)
    for _ in range(200):
        durations = rng.integers(0, 6, size=rng.integers(0, 40) * step).astype(np.float32)
        durations = durations[::step]
        want = [0.0, *itertools.accumulate(durations.tolist())]
        sums = FrameSums(durations)
        asked = rng.integers(0, len(want), size=5).tolist()
        for p in asked:
            assert sums[p] == want[p]
        assert sums._sums == want[: max(asked) + 1]  # no further


def test_heard_is_the_words_whose_sound_ended() -> None:
    words = [Word((0, 5), 50.0, 200.0), Word((6, 11), 300.0, 200.0), Word((12, 20), 600.0, 10.0)]
    assert heard_span(words, 0.0) == (0, 0)
    assert heard_span(words, 249.0) == (0, 5)  # within the 2 ms slack
    assert heard_span(words, 497.0) == (0, 5)
    assert heard_span(words, 10_000.0) == (0, 20)
    assert heard_span([], 1000.0) == (0, 0)
