"""espeak phonemes exactly as piper groups them, without piper 1.8's per-call leak."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from piper.phonemize_espeak import EspeakPhonemizer

from appliance.model.voices import VoiceInfo, bundled_voice_path
from appliance.speech import IntArray
from appliance.text.phonemize import Phonemizer, espeak_sentences

TEXTS = [
    "Hello there, world. And more",
    "No terminator at all",
    "Café au lait; déjà vu: oui!",
    "What? Really! Three items.",
    "Dr. Smith went to Washington, D.C. on the 4th.",
    "",
    "   ",
    "Zürich, Köln and São Paulo — naïve façade.",
]


@pytest.mark.parametrize("text", TEXTS)
def test_sentences_equal_piper(text: str) -> None:
    assert espeak_sentences("en-us", text) == EspeakPhonemizer().phonemize("en-us", text)


def test_repeated_calls_do_not_grow_the_heap() -> None:
    for i in range(50):  # warm espeak's own caches
        espeak_sentences("en-us", f"Request {i}: hello there, world. And more")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(300):
            espeak_sentences("en-us", f"Request {i}: hello there, world. And more")
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.count_diff for s in after.compare_to(before, "filename") if s.count_diff > 0)
    # The leaking bridge keeps ~8 objects per call alive (2 400 here).
    assert grown < 100


def test_repeated_calls_do_not_grow_the_c_heap() -> None:
    import psutil

    proc = psutil.Process()
    for i in range(300):
        espeak_sentences("en-us", f"Warm up {i}, please.")
    before = proc.memory_info().rss
    for i in range(4000):
        espeak_sentences("en-us", f"Request {i}: hello there.")
    grown_mb = (proc.memory_info().rss - before) / 1e6
    # Setting espeak's voice on every call, as piper does, leaks ~1.4 kB a call (5.4 MB here).
    assert grown_mb < 2.0


def test_switching_voices_changes_the_phonemes() -> None:
    us = espeak_sentences("en-us", "water tomato")
    gb = espeak_sentences("en", "water tomato")
    assert us != gb
    assert espeak_sentences("en-us", "water tomato") == us


def test_ids_frame_the_phonemes_with_bos_pad_eos() -> None:
    import json

    path = bundled_voice_path()
    info = VoiceInfo.from_config("joe", json.loads(path.with_name(path.name + ".json").read_text()))
    ph = Phonemizer(info)
    ids = ph.ids("Hi.")
    m = info.phoneme_id_map
    assert ids[0] == m["^"][0] and ids[-1] == m["$"][0]
    assert ids[1] == m["_"][0]


def test_word_sizes_keep_the_words_used_last(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from appliance.text import phonemize

    path = bundled_voice_path()
    info = VoiceInfo.from_config("joe", json.loads(path.with_name(path.name + ".json").read_text()))
    ph = Phonemizer(info)
    monkeypatch.setattr(phonemize, "WORD_SIZE_CACHE", 3)
    asked: list[str] = []
    ids = ph.ids

    def counted(text: str) -> IntArray:
        asked.append(text)
        return ids(text)

    monkeypatch.setattr(ph, "ids", counted)
    for word in ("the", "library", "the", "committee", "morning", "the", "library"):
        ph.word_size(word)
    # "library" was the least recently used when "morning" came: it was phonemized again.
    assert asked == ["the", "library", "committee", "morning", "library"]
    assert ph.word_size("library") == int(ph.kinds.sound[ids("library")].sum())
