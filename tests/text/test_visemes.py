"""The phoneme → viseme table (no model): every symbol of the bundled voice's map has a
shape, and words read as the mouth makes them."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from appliance.model.voices import bundled_voice_path
from appliance.text.phonemize import BOS, BOUNDARY_PHONEMES, EOS, PAD, Phonemizer
from appliance.text.visemes import (
    NEXT,
    PREVIOUS,
    SIL,
    SYMBOL_VISEMES,
    VISEMES,
    VisemeTable,
    unknown_symbols,
)
from appliance.voicetypes import VoiceInfo

FIXTURES = Path(__file__).parent.parent / "fixtures" / "voices"


def id_map(path: Path) -> dict[str, list[int]]:
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f)["phoneme_id_map"])


def test_the_set_is_ovrs_fifteen() -> None:
    assert VISEMES == (
        "sil", "PP", "FF", "TH", "DD", "kk", "CH", "SS", "nn", "RR", "aa", "E", "ih", "oh", "ou"
    )  # fmt: skip
    assert set(SYMBOL_VISEMES.values()) == {*range(len(VISEMES)), NEXT, PREVIOUS}


@pytest.mark.parametrize(
    "config",
    [Path(f"{bundled_voice_path()}.json"), *sorted(FIXTURES.glob("*.onnx.json"))],
    ids=lambda p: p.name,
)
def test_every_symbol_of_a_voice_has_a_shape(config: Path) -> None:
    """The whole map: a sounding symbol has a viseme; pads take the next phoneme's,
    word gaps, punctuation and the ends are sil."""
    m = id_map(config)
    assert unknown_symbols(m) == []
    assert SYMBOL_VISEMES[PAD] == NEXT
    for symbol in (BOS, EOS, *BOUNDARY_PHONEMES):
        if symbol in m:
            assert SYMBOL_VISEMES[symbol] == SIL, symbol
    # Every letter (not a modifier letter: ˈ ː ʰ join their neighbours) has a shape of its
    # own; the glottal stop is the one letter documented as sil.
    letters = [s for s in m if unicodedata.category(s[0]) in ("Ll", "Lu", "Lo") and s != "ʔ"]
    assert len(letters) > 40
    assert [s for s in letters if SYMBOL_VISEMES[s] in (SIL, NEXT, PREVIOUS)] == []


@pytest.mark.parametrize(
    ("ipa", "want"),
    [
        ("mæp", "PP aa PP"),
        ("fɪʃ", "FF ih CH"),
        ("θɪŋk", "TH ih kk kk"),
        ("ðə", "TH E"),
        ("sɔː", "SS oh"),  # ː lengthens the vowel before it
        ("ɹˈʌn", "RR aa nn"),  # a stress mark takes the next phoneme's shape
        ("duː", "DD ou"),
        ("liːv", "nn ih FF"),
        ("wˈɛl", "ou E nn"),
    ],
)
def test_words_read_as_the_mouth_makes_them(ipa: str, want: str) -> None:
    codes = [SYMBOL_VISEMES[ch] for ch in ipa]
    got = [VISEMES[c] for c in codes if c not in (NEXT, PREVIOUS)]
    assert " ".join(got) == want


def test_the_table_maps_a_voices_ids_at_once() -> None:
    path = Path(f"{bundled_voice_path()}.json")
    m = id_map(path)
    table = VisemeTable.of(m)
    ids = [m[BOS][0], m[PAD][0], m["m"][0], m[PAD][0], m["æ"][0], m[" "][0], m[EOS][0]]
    assert list(table.of_ids(ids)) == [SIL, NEXT, 1, NEXT, 10, SIL, SIL]
    assert table.of_ids([*ids, 300])[-1] == SIL  # an id past a byte: none of the voice's
    # The phonemizer carries its voice's table.
    with open(path, encoding="utf-8") as f:
        info = VoiceInfo.from_config("joe", json.load(f))
    assert Phonemizer(info).visemes == table
