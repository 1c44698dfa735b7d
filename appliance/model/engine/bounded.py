"""Encoder calls of bounded size: no call takes more than ``engine.max_phonemes`` ids.

The text encoder's memory grows about quadratically with its input (self-attention over
every phoneme id): one clause of 4 000 ids held 2.4 GB.  A sentence within
``streaming.max_sentence_chars`` stays well under the bound, but a clause can carry
many more ids than characters (a long ``<phoneme ph>``, lexicon respellings, a "word" of
thousands of letters espeak spells out), so the bound is applied to the ids themselves,
for every backend and every path into the encoder.

Beyond the bound the ids are encoded in pieces, each cut after a word gap or pause id
(anywhere, where a piece has none) and wrapped in the voice's own start and end ids.
The pieces' latents are joined frame to frame and decoded as one: the decoder's and the
flow's windows run across the join, so it has no click and needs no fade.  It is a cut
where piper-tts would not cut (each piece has its own intonation), documented with the
bound: only text that could not be spoken otherwise takes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from appliance.model.engine.base import Encoded, Scales, VoiceModel
from appliance.speech import FloatArray, IntArray

IdTest = Callable[[int], bool]


@dataclass(frozen=True)
class Pieces:
    """How ids beyond the bound are cut: at most ``max_ids`` ids in one call (with the
    wrapper ids), a piece ending after the last id ``is_cut`` accepts (a word gap, a
    pause) where it has one."""

    max_ids: int
    is_cut: IdTest

    def ranges(self, ids: IntArray) -> list[tuple[int, int]]:
        """[start, end) ranges of ``ids``' inner ids (between the start pair and the end
        id), each short enough that with the 3 wrapper ids it stays within ``max_ids``.

        A piece ends after the last id ``is_cut`` accepts and its pad; a piece with none
        is cut at the bound (at an even offset: a phoneme and its pad stay together)."""
        room = max(2, self.max_ids - 3)
        start, end = 2, len(ids) - 1
        out: list[tuple[int, int]] = []
        while end - start > room:
            stop = start + room
            cut = next((k + 2 for k in range(stop - 2, start, -1) if self.is_cut(int(ids[k]))), 0)
            if cut <= start or cut > stop:
                cut = start + room - room % 2
            out.append((start, cut))
            start = cut
        out.append((start, end))
        return out

    def encode(
        self, model: VoiceModel, ids: IntArray, scales: Scales, speaker: int | None, prior: bool
    ) -> tuple[IntArray, Encoded]:
        """``model.encode_prior`` (``prior``) or ``model.encode`` of ``ids``, in pieces.
        Returns the ids the durations belong to (``ids`` itself, or the pieces' ids one
        after the other) and the joined result."""
        run = model.encode_prior if prior else model.encode
        if len(ids) <= self.max_ids:
            return ids, run(ids, scales, speaker)
        ranges = self.ranges(ids)
        pieces = [_wrap(ids, a, b) for a, b in ranges]
        parts = [
            run(p, _piece_scales(scales, a, b), speaker)
            for p, (a, b) in zip(pieces, ranges, strict=True)
        ]
        return np.concatenate(pieces), _joined(parts)

    def fused(
        self, model: VoiceModel, ids: IntArray, scales: Scales, speaker: int | None
    ) -> FloatArray:
        """``model.fused`` of ``ids`` in pieces (a voice that cannot stream), the pieces'
        audio one after the other."""
        if len(ids) <= self.max_ids:
            return model.fused(ids, scales, speaker)
        pieces = [_wrap(ids, a, b) for a, b in self.ranges(ids)]
        return np.concatenate([model.fused(p, scales, speaker) for p in pieces])


def _wrap(ids: IntArray, a: int, b: int) -> IntArray:
    """Inner ids [a, b) between the utterance's own start pair and end id."""
    return np.concatenate([ids[:2], ids[a:b], ids[-1:]])


def _piece_scales(scales: Scales, a: int, b: int) -> Scales:
    """``scales`` for the piece of inner ids [a, b): its anchors, in its own positions."""
    if not scales.anchors:
        return scales
    inside = tuple(p - a + 2 for p in scales.anchors if a <= p < b)
    return dataclasses.replace(scales, anchors=inside)


def _joined(parts: list[Encoded]) -> Encoded:
    """The pieces' encodings as one, frame after frame."""
    durations = np.concatenate([e.durations for e in parts])
    g = parts[0].g
    bases = [e.base_frames for e in parts if e.base_frames is not None]
    base = sum(bases) if len(bases) == len(parts) else None
    z_ps = [e.z_p for e in parts if e.z_p is not None]
    if len(z_ps) == len(parts):  # the flow is left to run windowed over the joined latent
        z_p = np.concatenate(z_ps, axis=2)
        return Encoded(
            z=np.empty_like(z_p), durations=durations, g=g, z_p=z_p, ready=0, base_frames=base
        )
    z = np.concatenate([e.z for e in parts], axis=2)  # (one backend: all complete, or none)
    return Encoded(z=z, durations=durations, g=g, base_frames=base)
