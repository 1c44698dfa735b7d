"""Checking a cut against the fused model, and finding the least context that passes.

One :class:`Reference` serves every check of a cut: the fused model's audio is the same for
each of them, and the whole model is the largest session a cut loads (the German test
voice's cut loaded it five times, 4 of its 17 s)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from appliance.model.engine.base import Scales
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.windows import decode_windows
from appliance.model.voices.cut import (
    CUT_TOLERANCE,
    VERIFY_SENTENCE,
    cut_lean_decoder,
    cut_margin_decoder,
)
from appliance.speech import IntArray
from appliance.text.phonemize import Phonemizer
from appliance.voicetypes import CutNames, FlowSplit, VoiceInfo

log = logging.getLogger("appliance.model.voices")


DEFAULT_CONTEXT = 16
"""Decoder frames of context on each side of a window, unless a voice verified fewer."""
CONTEXT_CANDIDATES = (4, 6, 8, 10, 12, 14, DEFAULT_CONTEXT)
MARGIN_CANDIDATES = (1, 2, 3, 4, 6, 8)
"""Frames of context a decoder keeps after each upsampling stage, tried in this order."""


class Reference:
    """The fused model's audio for :data:`VERIFY_SENTENCE`, zero noise, and what it was
    made from: what every check of one cut compares with.  Made on the first check that
    asks and kept; a voice that cannot make it fails each check that asks (inside the
    check's guard, see :func:`_check_model`)."""

    def __init__(self, info: VoiceInfo, model_path: Path) -> None:
        self.info, self.model_path = info, model_path
        self.scales = Scales(0.0, info.length_scale, 0.0)
        self._ids: IntArray | None = None
        self._audio: np.ndarray | None = None

    @property
    def ids(self) -> IntArray:
        if self._ids is None:
            self._ids = Phonemizer(self.info).ids(VERIFY_SENTENCE)
        return self._ids

    @property
    def sid(self) -> int | None:
        return self.info.speaker_id(None)

    def audio(self) -> np.ndarray:
        if self._audio is None:
            fused = OnnxVoiceModel.load(self.model_path, None, None, None, threads=1)
            self._audio = fused.fused(self.ids, self.scales, self.sid)
        return self._audio


@dataclass(frozen=True)
class DecoderCut:
    """What the decoder rewrites are checked with: the cut's decoder and names, what runs
    before the decoder (the encoder, or the flow split), the context the cut passed with,
    and the slot the rewritten decoders are written to."""

    ref: Reference
    dec: Path
    names: CutNames
    enc: Path | FlowSplit
    context: int
    slot: Path


def _first_part(enc: Path | FlowSplit) -> tuple[Path, FlowSplit | None]:
    """What the check runs before the decoder: the encoder, or the prior and the flow."""
    if isinstance(enc, FlowSplit):
        return enc.prior_path, enc
    return enc, None


def margin_decoder(cut: DecoderCut) -> tuple[int | None, Path | None, str]:
    """The fewest frames of context the decoder can keep after each upsampling stage and
    still pass the cut's check at its context (:data:`MARGIN_CANDIDATES`), and the decoder
    written with them; None, None when none passes."""
    first, flow = _first_part(cut.enc)
    context, slot = cut.context, cut.slot
    notes: list[str] = []
    for keep in (k for k in MARGIN_CANDIDATES if k < context):
        try:
            path = cut_margin_decoder(cut.dec, slot, keep)
        except (ValueError, OSError) as exc:  # ValueError: a graph the rewrite does not know
            return None, None, f"cannot crop: {exc}"
        passed, note = _check_model(cut.ref, first, path, cut.names, flow, (context,))
        notes.append(f"keep {keep}: {note.removeprefix(f'context {context}: ')}")
        if passed is not None:
            return keep, path, "; ".join(notes)
    (slot / "decoder_margins.onnx").unlink(missing_ok=True)
    return None, None, "; ".join(notes) or "no frames to save"


def lean_decoder(cut: DecoderCut, keep: int | None = None) -> tuple[Path | None, str]:
    """The 2-D decoder, when it can be written and passes the cut's check at its context;
    with ``keep``, cropping its margins (as the 1-D one passed with), else whole."""
    first, flow = _first_part(cut.enc)
    notes: list[str] = []
    for crop in dict.fromkeys((keep, None)):
        try:
            lean = cut_lean_decoder(cut.dec, cut.slot, crop)
        except (ValueError, OSError) as exc:  # ValueError: a graph the rewrite does not know
            notes.append(f"cannot rewrite: {exc}")
            continue
        passed, note = _check_model(cut.ref, first, cut.dec, cut.names, flow, (cut.context,), lean)
        notes.append(f"margins kept {crop}: {note}" if crop is not None else note)
        if passed is not None:
            return lean, "; ".join(notes)
    return None, "; ".join(notes)


def _check_model(
    ref: Reference,
    enc: Path,
    dec: Path,
    names: CutNames,
    flow: FlowSplit | None,
    contexts: tuple[int, ...] = (DEFAULT_CONTEXT,),
    lean: Path | None = None,
) -> tuple[int | None, str]:
    """Windowed decode vs the fused model, zero noise; with ``flow``, the flow windowed too,
    in the two steps a request's first clause takes; with ``lean``, every window through
    the 2-D decoder.

    Returns the first of ``contexts`` (decoder frames on each side of a window) whose
    windows of 8 frames (a first chunk) and of 32 are within :data:`CUT_TOLERANCE` of the
    fused model on every sample, or None when none is, and a note with the differences.
    """
    diffs: list[str] = []
    try:
        model = OnnxVoiceModel.load(
            ref.model_path, enc, dec, names, threads=1, flow=flow, lean_decoder=lean
        )
        fused = ref.audio()
        for context in contexts:
            worst = 0.0
            for window in (8, 32):
                # With the flow split, the first window runs the flow over its own frames
                # and later ones over the rest: the two steps of a request's first clause.
                encoded = model.encode_prior(ref.ids, ref.scales, ref.sid)
                windowed = decode_windows(model, encoded, window, context, ref.info.hop_length)
                if windowed.shape != fused.shape:
                    return None, f"length differs: {windowed.shape} vs {fused.shape}"
                diff = float(np.max(np.abs(windowed - fused))) if fused.size else 0.0
                worst = max(worst, diff)
            diffs.append(f"context {context}: max abs difference {worst:.2e}")
            if worst <= CUT_TOLERANCE:
                return context, "; ".join(diffs)
    except Exception as exc:  # any failure of a foreign model means "don't stream it"
        return None, f"check raised {type(exc).__name__}: {exc}"
    return None, "; ".join(diffs)


def verify_cut(ref: Reference, enc: Path, dec: Path, names: CutNames) -> tuple[bool, str]:
    """Windowed decode of the halves vs the fused model, zero noise."""
    context, note = _check_model(ref, enc, dec, names, None)
    return context is not None, note


def verify_flow(ref: Reference, dec: Path, names: CutNames, flow: FlowSplit) -> tuple[bool, str]:
    """Prior, windowed flow and windowed decode vs the fused model, zero noise."""
    context, note = _check_model(ref, flow.prior_path, dec, names, flow)
    return context is not None, note


def smallest_context(
    ref: Reference, dec: Path, names: CutNames, enc: Path | FlowSplit
) -> tuple[int, str]:
    """The fewest decoder context frames that still pass the cut's check, and the note.

    Every frame of context is decoded again by the window on either side, so it is the
    whole of streaming's extra decoder cost (and part of the first packet's).  HiFi-GAN's
    receptive field is wide, but what reaches the edge from far away is tiny: the
    bundled voice passes at 10 frames (3.1e-6) and fails at 8 (1.5e-3).  Found once per
    voice at cut time and cached with the cut; DEFAULT_CONTEXT when nothing smaller passes.
    ``enc``: the encoder half, or the flow split when the voice streams with it.
    """
    first, flow = _first_part(enc)
    context, note = _check_model(ref, first, dec, names, flow, CONTEXT_CANDIDATES)
    return (DEFAULT_CONTEXT if context is None else context), note
