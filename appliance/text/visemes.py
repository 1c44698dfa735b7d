"""Visemes: the mouth shape each of a voice's phoneme symbols makes (``visemes: true``).

The set is Oculus/OVR's 15 (:data:`VISEMES`, a viseme's number is its index): ``sil``,
``PP`` (p b m), ``FF`` (f v), ``TH`` (θ ð), ``DD`` (t d), ``kk`` (k g), ``CH`` (ʃ ʒ tʃ dʒ),
``SS`` (s z), ``nn`` (n l), ``RR`` (ɹ), ``aa`` (ɑ æ ʌ), ``E`` (ɛ e ə), ``ih`` (ɪ i),
``oh`` (ɔ o) and ``ou`` (u ʊ w).  :data:`SYMBOL_VISEMES` maps every symbol of the
espeak-ng phoneme set Piper voices are trained on (the bundled voice's whole
``phoneme_id_map``; a test walks it) to one of them, or says how it joins its neighbours:

- the pad between phonemes (``_``) and the stress marks (ˈ ˌ) take the viseme of the
  phoneme after them (:data:`NEXT`): a pad is the voice's move into the next phoneme
  (word timings start a word at it too), a stress mark opens its syllable;
- length marks (ː ˑ), diacritics (ʰ ʲ ˤ ˞ and the combining marks), tone digits and ↓
  lengthen the phoneme before them (:data:`PREVIOUS`);
- word gaps, punctuation, the ends (^ $) and the glottal stop ʔ are ``sil``: a closed
  or resting mouth.

espeak writes an affricate as two symbols (t ʃ), which read as ``DD`` then ``CH``; ``h``
is ``kk`` (open and back), not its vowel's shape.

:class:`VisemeTable` turns a voice's ids into these codes at once (``bytes.translate``,
a C loop: the first packet's path reads a clause's ids this way).  Pure data and
functions, no state beyond a table per voice (256 bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

VISEMES = ("sil", "PP", "FF", "TH", "DD", "kk", "CH", "SS", "nn", "RR", "aa", "E", "ih", "oh", "ou")
"""The OVR viseme set; a viseme's number on the wire is its index here."""
SIL = 0
NEXT = 254
"""The code of a symbol that takes the viseme of the phoneme after it (pads, stress)."""
PREVIOUS = 255
"""The code of a symbol that lengthens the phoneme before it (length, diacritics, tone)."""

_GROUPS: dict[str, str] = {
    "sil": " ^$!'(),-.:;?\"#—ʔ",
    "PP": "pbmɓʙʘβɸ",
    "FF": "fvʋⱱɱ",
    "TH": "θð",
    "DD": "tdʈɖɗɾɽǀǃǂ",
    "kk": "kɡgXqɢɠʛcɟʄʡŋɴxɣχʁħʕʜʢhɦɰ",
    "CH": "ʃʒɕʑʂʐçʝɧ",
    "SS": "szʦ",
    "nn": "nlɲɳɫɬɮɭʎʟɺǁ",
    "RR": "rɹɻʀɚɝ",
    "aa": "aɑɐæɒɶʌ",
    "E": "eɛəɘɜεɤ",
    "ih": "iɪɨᵻjɯ",
    "oh": "oɔɵɞœ",
    "ou": "uʊʉwʍɥyʏø",
}
_JOINERS: dict[int, str] = {
    NEXT: "_ˈˌ",
    PREVIOUS: "ːˑʰʲʷˤ˞↓↑0123456789\u0327\u0303\u032a\u032f\u0329\u033a\u033b\u031d\u030a",
}
_DIPHTHONGS = {"aɪ": "aa", "aʊ": "aa", "ɔɪ": "oh", "eɪ": "E", "oʊ": "oh"}
"""Symbols of two letters (some voices' maps): the shape they open with."""

SYMBOL_VISEMES: Mapping[str, int] = {
    **{s: VISEMES.index(name) for name, symbols in _GROUPS.items() for s in symbols},
    **{s: code for code, symbols in _JOINERS.items() for s in symbols},
    **{s: VISEMES.index(name) for s, name in _DIPHTHONGS.items()},
}
"""Each phoneme symbol's viseme number, or :data:`NEXT` / :data:`PREVIOUS` (see the module)."""


@dataclass(frozen=True)
class VisemeTable:
    """A voice's ids → viseme codes, a byte each (:data:`SYMBOL_VISEMES`' codes)."""

    codes: bytes
    """Indexed by id (256 of them; ids the map does not name, or a symbol the table does
    not know, are ``sil``)."""

    @classmethod
    def of(cls, id_map: Mapping[str, Sequence[int]]) -> VisemeTable:
        table = bytearray(256)
        for symbol, ids in id_map.items():
            for i in ids:
                if 0 <= i < 256:
                    table[i] = SYMBOL_VISEMES.get(symbol, SIL)
        return cls(bytes(table))

    def of_ids(self, ids: Sequence[int]) -> bytes:
        """The ids' codes, a byte each (an id past 255 is ``sil``)."""
        try:
            return bytes(ids).translate(self.codes)
        except ValueError:  # an id past a byte: none of the bundled voices has one
            return bytes(self.codes[i] if 0 <= i < 256 else SIL for i in ids)


def unknown_symbols(id_map: Mapping[str, Sequence[int]]) -> list[str]:
    """Symbols of a voice's map the table has no entry for (they would read as ``sil``)."""
    return [s for s in id_map if s not in SYMBOL_VISEMES]
