"""Character alignment (ElevenLabs' ``alignment``) from ttsd's word timings.

ttsd times written words (:class:`~appliance.speech.Word`: a span of the text as sent, its
first phoneme's start and its last phoneme's end, exact to a frame).  ElevenLabs times
characters, in blocks: each audio message carries the characters it aligns, their start
times relative to the block's start, and their durations; consecutive blocks tile the
audio (a client adds a block's last end to its clock: Pipecat does).

So each word a chunk brings is timed character by character: its time spread evenly over
its characters, the characters between two words (spaces, punctuation) given the pause
between them.  A block is the characters that start within the audio sent so far (a
word that runs on into the next chunk is split there); the rest wait for the next
block, and the last audio message of a context carries what is left.  Times are whole
milliseconds, rounded at each character boundary from the exact times, so they never
drift: a character's start is its exact start rounded.  State: the characters timed and
not yet sent (at most a chunk's words) and three numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

from appliance.doors.elevenlabs.messages import Alignment
from appliance.speech import Word


class Aligner:
    """One context's alignment: its characters timed but not yet sent, and where in its
    text and its audio the last block ended."""

    def __init__(self) -> None:
        self.char = 0
        """Characters of the text already timed."""
        self.t_timed = 0.0
        """The end of the last character timed (exact, in the context's audio)."""
        self.t_ms = 0.0
        """The end of the last character sent: where the next block starts."""
        self.pending: list[tuple[str, float, float]] = []
        """Characters timed, not yet sent: (character, start, end), exact."""

    def add(self, text: str, words: Iterable[Word]) -> None:
        """Time ``words`` (in order) of ``text``, the context's text as sent."""
        t = self.t_timed
        for w in words:
            start, end = max(w.text_span[0], self.char), min(w.text_span[1], len(text))
            if end <= start:
                continue
            w0 = max(w.offset_ms, t)
            w1 = max(w0, w.offset_ms + w.duration_ms)
            self._spread(text[self.char : start], t, w0)
            self._spread(text[start:end], w0, w1)
            self.char, t = end, w1
        self.t_timed = t

    def _spread(self, piece: str, t0: float, t1: float) -> None:
        n = len(piece)
        for i, c in enumerate(piece):
            self.pending.append((c, t0 + (t1 - t0) * i / n, t0 + (t1 - t0) * (i + 1) / n))

    def block(self, until_ms: float | None = None) -> Alignment | None:
        """The characters timed that start before ``until_ms`` (the end of the audio sent
        with them; None: all), as a block; None when there are none."""
        k = len(self.pending)
        if until_ms is not None:
            k = next((i for i, p in enumerate(self.pending) if p[1] >= until_ms), k)
        if k == 0:
            return None
        taken, self.pending = self.pending[:k], self.pending[k:]
        base = round(self.t_ms)
        self.t_ms = taken[-1][2]
        return {
            "chars": [c for c, _a, _b in taken],
            "charStartTimesMs": [round(a) - base for _c, a, _b in taken],
            "charDurationsMs": [round(b) - round(a) for _c, a, b in taken],
        }
