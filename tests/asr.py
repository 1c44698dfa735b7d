"""Speech recognition helpers for round-trip tests: resample, recognise, word error rate.

pocketsphinx 5 ships a US English acoustic model, dictionary and language model, so the
tests need no download. Recognition is not perfect on synthetic speech; tests compare
error rates between two renderings of the same words rather than demanding zero errors.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import soxr
from pocketsphinx import Decoder

ASR_RATE = 16_000

_NOT_WORD = re.compile(r"[^a-z0-9' ]+")


@functools.lru_cache(maxsize=1)
def _decoder() -> Decoder:
    # Loading the model takes ~0.3 s; one decoder serves every test in the session.
    return Decoder(samprate=ASR_RATE)


def recognize(audio_int16: np.ndarray, sample_rate: int) -> str:
    """Words pocketsphinx hears in mono int16 ``audio_int16`` at ``sample_rate`` Hz."""
    audio = np.ascontiguousarray(audio_int16, dtype=np.int16)
    if sample_rate != ASR_RATE:
        audio = soxr.resample(audio, sample_rate, ASR_RATE)
    decoder = _decoder()
    decoder.start_utt()
    decoder.process_raw(audio.astype(np.int16).tobytes(), full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return str(hyp.hypstr) if hyp is not None else ""


def words(text: str) -> list[str]:
    """Lower-case words, hyphenated compounds split, punctuation dropped."""
    return _NOT_WORD.sub(" ", text.lower().replace("-", " ")).split()


def word_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, words in ``ref``): word-level Levenshtein."""
    r, h = words(ref), words(hyp)
    row = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        prev_diag, row[0] = row[0], i
        for j, hw in enumerate(h, 1):
            prev_diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev_diag + (rw != hw))
    return row[-1], len(r)


def wer(ref: str, hyp: str) -> float:
    """Word error rate of ``hyp`` against ``ref`` (0.0 = perfect; may exceed 1.0)."""
    errors, n = word_errors(ref, hyp)
    if n == 0:
        return 0.0 if not words(hyp) else 1.0
    return errors / n
