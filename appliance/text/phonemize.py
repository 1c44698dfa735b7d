"""Text → phoneme ids with espeak-ng, as the Piper voices were trained.

espeak-ng keeps global state in C (the current voice), so every call goes
through one process-wide lock.  The lock and the bridge are the only
module-level state here.

We call piper's ``espeakbridge`` directly rather than
``EspeakPhonemizer.phonemize`` because the bridge in piper-tts 1.8 leaks one
reference to every clause tuple it returns (``PyList_Append`` of a fresh
``Py_BuildValue``): about 0.35 kB per request, for ever, in a daemon.  The
leak is measured once at start-up and repaired per call only if present, so a
fixed bridge is left alone.  It also sets espeak's voice only when it changes:
setting it leaks in C (~1.4 kB a call).  The grouping into sentences mirrors
piper's (a test holds the two equal).
"""

from __future__ import annotations

import ctypes
import logging
import re
import sys
import threading
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from appliance.speech import IntArray
from appliance.text.visemes import VisemeTable

if TYPE_CHECKING:
    from appliance.voicetypes import VoiceInfo


class Override(Protocol):
    """Characters [start, end) of a clause said with ``ipa`` (frontend.PhonemeOverride)."""

    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def ipa(self) -> str: ...


def ipa_symbols(ipa: str, id_map: Mapping[str, Sequence[int]], voice: str) -> list[str]:
    """IPA as written → the voice's phoneme symbols, one per code point as espeak's are.

    Raises ``bad_request`` naming the first symbol the voice has no id for.
    """
    from appliance.errors import ErrorCode, ServiceError

    out: list[str] = []
    for ch in unicodedata.normalize("NFD", " ".join(ipa.split())):
        if ch not in id_map:
            raise ServiceError(
                ErrorCode.BAD_REQUEST,
                f"phoneme {ch!r} (U+{ord(ch):04X}) in {ipa!r} is not a symbol of voice {voice}",
            )
        out.append(ch)
    return out


log = logging.getLogger(__name__)

_ESPEAK_LOCK = threading.Lock()
_bridges: list[_Bridge] = []  # initialised once, under the lock

BOS, EOS, PAD = "^", "$", "_"
# Phonemes that mark a place where audio may be cut (word gaps and pauses).
BOUNDARY_PHONEMES = frozenset(" ,.;:!?—-")
# Stop consonants: their closure is near silence, where two renderings join unheard.
CLOSURE_PHONEMES = frozenset("pbtdkgɡ")
WORD_SIZE_CACHE = 16384
"""Words whose size a phonemizer keeps (~1.3 MB): a word not kept costs ~20 µs of espeak
the next time a sentence needs it (docs/word-timings.md)."""
_LANG_SWITCH = re.compile(r"\([^()]+\)")
"""espeak's language switch, "(en)": no parenthesis inside (a run of "(" with no ")" was
read to its end from each of them)."""

_py_decref = ctypes.pythonapi.Py_DecRef
_py_decref.argtypes = [ctypes.py_object]
_py_decref.restype = None


@dataclass
class _Bridge:
    module: Any
    leaks_clause_refs: bool
    voice: str | None = None

    def clauses(self, voice: str, text: str) -> list[tuple[str, str, bool]]:
        # Only when it changes: espeak_SetVoiceByName leaks ~1.4 kB of C heap per call
        # (piper calls it for every text).  This module is the daemon's only user of
        # espeak, so the voice set last is still the current one.
        if voice != self.voice:
            self.module.set_voice(voice)
            self.voice = voice
        out: list[tuple[str, str, bool]] = self.module.get_phonemes(text)
        if self.leaks_clause_refs:
            for clause in out:
                _py_decref(clause)
        return out


def _extra_refs(module: Any) -> int:
    """References the bridge leaks on each clause tuple (0 for a correct bridge)."""
    probe = module.get_phonemes("a, b.")
    control = [tuple(x for x in ("a", ",", False))]
    # Both are held only by their list; getrefcount adds its own argument.
    return sys.getrefcount(probe[0]) - sys.getrefcount(control[0])


def _bridge() -> _Bridge:
    if not _bridges:
        from piper import espeakbridge
        from piper.phonemize_espeak import ESPEAK_DATA_DIR

        espeakbridge.initialize(str(ESPEAK_DATA_DIR))
        espeakbridge.set_voice("en-us")
        extra = _extra_refs(espeakbridge)
        if extra not in (0, 1):
            log.warning("espeak bridge holds %d extra references per clause; not repairing", extra)
        elif extra:
            log.debug("espeak bridge leaks a reference per clause; repairing each call")
        _bridges.append(_Bridge(espeakbridge, extra == 1, voice="en-us"))
    return _bridges[0]


def espeak_sentences(voice: str, text: str) -> list[list[str]]:
    """Phonemes of ``text`` grouped by sentence, as piper's ``EspeakPhonemizer`` gives them."""
    with _ESPEAK_LOCK:
        clauses = _bridge().clauses(voice, text)
    sentences: list[list[str]] = []
    current: list[str] = []
    for phonemes, terminator, end_of_sentence in clauses:
        # Flags such as "(fr)" surround words espeak read in another language.
        phonemes = _LANG_SWITCH.sub("", phonemes) + terminator
        if terminator in (",", ":", ";"):
            phonemes += " "
        # One phoneme per code point, accents separate, as the voices were trained.
        current.extend(unicodedata.normalize("NFD", phonemes))
        if end_of_sentence:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences


BoolTable = npt.NDArray[np.bool_]

ID_SILENT, ID_SOUND, ID_SPACE, ID_PAD = b".", b"s", b" ", b"p"
"""An id's kind in :attr:`IdKinds.codes`, a byte each (silent: punctuation, the ends; a
gap is a space, so a clause's kinds split at its word gaps)."""


@dataclass(frozen=True)
class IdKinds:
    """Which ids are word gaps, a word's own sound and pads, as tables indexed by id: a
    whole id array looked up at once (``kinds.sound[ids]``), or a clause's ids read as
    one string of kinds (:meth:`string`), where calling :meth:`Phonemizer.is_sound` per
    id costs ~0.1 µs each.  A gap or a pad never sounds, and a pad is no gap."""

    space: BoolTable
    sound: BoolTable
    pad: BoolTable
    codes: tuple[bytes, ...]
    """Each id's kind (:data:`ID_SOUND` ...), a byte: the word-timing passes on the first
    packet's path read a clause's ids as one string of kinds (:meth:`string`) and search
    it with ``bytes``'s and ``re``'s C loops, as far as they need.  Measured inside
    the daemon, right after the model's runs, on the core table's 555-id sentence: a
    Python loop over its ids 0.15 ms, ``str.join`` of the codes 0.08 ms, ``bytes`` of
    the ids translated 0.02 ms; numpy's calls cost more than the work."""
    _bytes: bytes = b""
    """``codes`` as a ``bytes.translate`` table, where every id fits in a byte."""

    @classmethod
    def of(
        cls, size: int, space: Collection[int], silent: Collection[int], pad: Collection[int]
    ) -> IdKinds:
        """Tables for ids 0..size-1: sounding is every id that is not ``silent``, a gap or
        a pad (the phonemizer's silent ids include both)."""

        def table(ids: Collection[int], value: bool = True) -> BoolTable:
            out = np.full(size, not value, dtype=np.bool_)
            out[list(ids)] = value
            out.flags.writeable = False  # shared by every stream of the voice
            return out

        if set(space) & set(pad):
            raise ValueError("an id cannot be both a word gap and a pad")
        sound = table({*silent, *space, *pad}, value=False)
        codes = [ID_SOUND if s else ID_SILENT for s in sound.tolist()]
        for i in space:
            codes[i] = ID_SPACE
        for i in pad:
            codes[i] = ID_PAD
        # Ids past the table are none of the voice's: silent, if one ever came.
        table_bytes = b"".join(codes).ljust(256, ID_SILENT) if size <= 256 else b""
        return cls(table(space), sound, table(pad), tuple(codes), table_bytes)

    def string(self, ids: Sequence[int]) -> bytes:
        """The ids' kinds as one string, a byte each (:data:`ID_SOUND` ...)."""
        if self._bytes:
            return bytes(ids).translate(self._bytes)
        return b"".join(map(self.codes.__getitem__, ids))


class Phonemizer:
    """Phonemes and ids for one voice."""

    def __init__(self, info: VoiceInfo) -> None:
        self.info = info
        self._id_map = info.phoneme_id_map
        self._boundary_ids = frozenset(
            i for p in BOUNDARY_PHONEMES for i in self._id_map.get(p, [])
        )
        self._space_ids = frozenset(self._id_map.get(" ", []))
        self._closure_ids = frozenset(i for p in CLOSURE_PHONEMES for i in self._id_map.get(p, []))
        silent = (*BOUNDARY_PHONEMES, BOS, EOS, PAD)
        self._silent_ids = frozenset(i for p in silent for i in self._id_map.get(p, []))
        self._pad_ids = frozenset(self._id_map.get(PAD, []))
        size = 1 + max((i for ids in self._id_map.values() for i in ids), default=0)
        self.kinds = IdKinds.of(size, self._space_ids, self._silent_ids, self._pad_ids)
        """The id tests below as tables (every id the map gives is in range)."""
        self.visemes = VisemeTable.of(self._id_map)
        """Each id's viseme (:mod:`appliance.text.visemes`)."""
        self._word_sizes: dict[str, int] = {}
        """Sounding ids of words said alone (word timings' alignment); bounded."""

    def phonemes(self, text: str) -> list[str]:
        """All phonemes of ``text`` as one utterance (espeak's sentences joined by a space)."""
        sentences = espeak_sentences(self.info.espeak_voice, text)
        out: list[str] = []
        for sentence in sentences:
            if not sentence:
                continue
            if out:
                out.append(" ")
            out.extend(sentence)
        return out

    def ipa(self, ipa: str) -> list[str]:
        """IPA as written (``<phoneme ph>``, a lexicon entry) → this voice's symbols."""
        return ipa_symbols(ipa, self._id_map, self.info.name)

    def phonemes_with(self, text: str, overrides: Sequence[Override]) -> list[str]:
        """Phonemes of ``text`` with the given character ranges said as written."""
        if not overrides:
            return self.phonemes(text)
        out: list[str] = []
        pos = 0
        for o in (*overrides, None):
            gap = text[pos : o.start if o is not None else len(text)]
            if any(c.isalnum() for c in gap):
                piece = self.phonemes(gap)
                # espeak drops punctuation that opens a text (", and then"); after an
                # override it is the override's comma, and the voice should pause.
                lead = [c for c in gap[: len(gap) - len(gap.lstrip(" ,;:"))] if c in ",;:"]
                if lead and out:
                    piece = [*lead, " ", *piece]
            else:  # only punctuation: espeak says nothing for it, but the voice pauses
                piece = [c for c in gap.strip() if c in self._id_map]
            if o is not None:
                piece = [*piece, *([" "] if piece else []), *self.ipa(o.ipa)]
                pos = o.end
            if out and piece and piece[0] not in BOUNDARY_PHONEMES and out[-1] != " ":
                out.append(" ")
            out.extend(piece)
        return out

    def ids_for(self, phonemes: list[str]) -> IntArray:
        m = self._id_map
        ids: list[int] = [*m[BOS], *m[PAD]]
        for p in phonemes:
            mapped = m.get(p)
            if mapped is None:
                continue  # a phoneme the voice was not trained on: skip, as piper does
            ids.extend(mapped)
            ids.extend(m[PAD])
        ids.extend(m[EOS])
        return np.asarray(ids, dtype=np.int64)

    def ids(self, text: str) -> IntArray:
        return self.ids_for(self.phonemes(text))

    def is_boundary(self, phoneme_id: int) -> bool:
        return phoneme_id in self._boundary_ids

    def is_space(self, phoneme_id: int) -> bool:
        """The id of a word gap (where SSML marks between words are placed)."""
        return phoneme_id in self._space_ids

    def is_sound(self, phoneme_id: int) -> bool:
        """The id of a word's own sound: not a pad, a word gap, punctuation or an end
        (word timings start and end words at these)."""
        return phoneme_id not in self._silent_ids

    def word_size(self, word: str) -> int:
        """How many sounding ids ``word`` has when said alone (cached: past
        :data:`WORD_SIZE_CACHE` words, the least recently used is dropped)."""
        sizes = self._word_sizes
        size = sizes.pop(word, None)
        if size is None:
            size = self.kinds.string(self.ids(word).tolist()).count(ID_SOUND)
            if len(sizes) >= WORD_SIZE_CACHE:
                # The least recently used goes (insertion order, renewed on each use): a
                # daemon's common words stay sized; dropping them all at once made every
                # word of the next sentences cold again.
                del sizes[next(iter(sizes))]
        sizes[word] = size
        return size

    def is_pad(self, phoneme_id: int) -> bool:
        """The blank id between phonemes (where the voice moves from one to the next)."""
        return phoneme_id in self._pad_ids

    def is_closure(self, phoneme_id: int) -> bool:
        """The id of a stop consonant (see :data:`CLOSURE_PHONEMES`)."""
        return phoneme_id in self._closure_ids
