"""Text → phoneme ids with espeak-ng, as the Piper voices were trained.

espeak-ng keeps global state in C (the current voice), so every call goes
through one process-wide lock.  The lock is the only module-level state here.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.engine.base import IntArray

if TYPE_CHECKING:
    from appliance.voices import VoiceInfo

_ESPEAK_LOCK = threading.Lock()
_espeak: list[Any] = []  # the bridge, initialised once under the lock

BOS, EOS, PAD = "^", "$", "_"
# Phonemes that mark a place where audio may be cut (word gaps and pauses).
BOUNDARY_PHONEMES = frozenset(" ,.;:!?—-")


def _bridge() -> Any:
    if not _espeak:
        from piper.phonemize_espeak import EspeakPhonemizer

        _espeak.append(EspeakPhonemizer())
    return _espeak[0]


class Phonemizer:
    """Phonemes and ids for one voice."""

    def __init__(self, info: VoiceInfo) -> None:
        self.info = info
        self._id_map = info.phoneme_id_map
        self._boundary_ids = frozenset(
            i for p in BOUNDARY_PHONEMES for i in self._id_map.get(p, [])
        )

    def phonemes(self, text: str) -> list[str]:
        """All phonemes of ``text`` as one utterance (espeak's sentences joined by a space)."""
        with _ESPEAK_LOCK:
            sentences: list[list[str]] = _bridge().phonemize(self.info.espeak_voice, text)
        out: list[str] = []
        for sentence in sentences:
            if not sentence:
                continue
            if out:
                out.append(" ")
            out.extend(sentence)
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

    def word_count(self, ids: IntArray) -> int:
        space = set(self._id_map.get(" ", []))
        return 1 + sum(1 for i in ids.tolist() if i in space)
