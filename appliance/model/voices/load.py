"""A voice ready to load: read, cut (or taken from the cache), checked, described."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

from appliance.model.voices.cut import (
    Probe,
    crops_margins,
    cut_flow,
    cut_model,
    find_cut,
    find_flow,
    probe_feeds,
)
from appliance.model.voices.discover import VoiceError
from appliance.model.voices.pair import (
    READ_TIMEOUT_S,
    ModelFacts,
    check_info,
    digest_of,
    read_info,
    within,
)
from appliance.model.voices.verify import (
    CONTEXT_CANDIDATES,
    DEFAULT_CONTEXT,
    DecoderCut,
    Reference,
    lean_decoder,
    margin_decoder,
    smallest_context,
    verify_cut,
    verify_flow,
)
from appliance.ops import atomic
from appliance.voicetypes import CutNames, FlowSplit, Voice, VoiceInfo

log = logging.getLogger("appliance.model.voices")


_CUT_FORMAT = 13  # bump when the cut or the check changes (13: relative attention banded)


def _cached(info: VoiceInfo, model_path: Path, digest: str, slot: Path) -> Voice | None:
    meta = json.loads((slot / "meta.json").read_text(encoding="utf-8"))
    if meta.get("sha256") != digest:
        return None
    cut = CutNames(**{**meta["cut"], "inputs": tuple(meta["cut"]["inputs"])})
    enc, dec = slot / "encoder.onnx", slot / "decoder.onnx"
    if not (enc.is_file() and dec.is_file()):
        return None
    flow = FlowSplit(slot / "prior.onnx", slot / "flow.onnx")
    has_flow = bool(meta.get("flow_ok")) and flow.prior_path.is_file() and flow.flow_path.is_file()
    lean = slot / "decoder2d.onnx"
    has_lean = bool(meta.get("lean_ok")) and lean.is_file()
    margins = slot / "decoder_margins.onnx"
    has_margins = bool(meta.get("margins_ok")) and margins.is_file()
    log.info("voice %s: cached split (%s)", info.name, "ok" if meta["ok"] else "failed")
    return Voice(
        info,
        model_path,
        digest,
        enc,
        dec,
        cut,
        bool(meta["ok"]),
        meta["note"],
        flow_split=flow if has_flow else None,
        lean_decoder_path=lean if has_lean else None,
        context_frames=_cached_context(meta.get("context_frames")),
        margin_decoder_path=margins if has_margins else None,
    )


def _cached_context(value: object) -> int:
    if type(value) is not int or value not in CONTEXT_CANDIDATES:
        raise ValueError(f"context_frames {value!r} is not one the check tries")
    return value


def load_voice(name: str, model_path: Path, cache_dir: Path) -> Voice:
    """Read the pair and check its config against the model (within a deadline: a hung
    file is a VoiceError), then the cached cut, or cut and verify once (:class:`_Preparation`)."""
    info, digest = within(
        READ_TIMEOUT_S, lambda: _read_pair(name, model_path, cache_dir), f"voice {name}"
    )
    slot = cache_dir / f"{digest[:32]}-v{_CUT_FORMAT}"
    if (slot / "meta.json").is_file():
        try:
            voice = _cached(info, model_path, digest, slot)
            if voice is not None:
                return voice
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("voice %s: cache entry unreadable (%s); cutting again", name, exc)
    about = prepare_estimate_s(model_path)
    log.info("preparing %s for streaming (first start only, about %d s)…", name, about)
    t0 = time.monotonic()
    voice = _Preparation(info, model_path, digest, slot).run()
    how = "streaming" if voice.split_ok else f"whole-sentence: {voice.split_note}"
    log.info("%s ready in %.1f s (%s)", name, time.monotonic() - t0, how)
    return voice


def _read_pair(name: str, model_path: Path, cache_dir: Path) -> tuple[VoiceInfo, str]:
    """The config, checked (:func:`~appliance.model.voices.pair.check_info`) against the
    model's sizes, and the model's digest.  The sizes are kept beside the cut's cache
    (``facts-<digest>.json``): a cached voice's graph is not parsed again at each start."""
    info = read_info(name, model_path)
    try:
        digest = digest_of(model_path)
    except OSError as exc:
        raise VoiceError(f"voice {name}: cannot read it: {exc.strerror or exc}") from exc
    known = cache_dir / f"facts-{digest[:32]}.json"
    try:
        facts = ModelFacts.load(known)
    except (OSError, ValueError, AttributeError):
        facts = check_graph(model_path, info)  # a foreign or truncated file: said plainly
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            facts.save(known)
        except OSError as exc:
            log.debug("voice %s: sizes not kept in the cache: %s", name, exc)
    check_info(info, facts)
    return info, digest


def prepare_estimate_s(model_path: Path) -> int:
    """Seconds a first cut takes on an idle CPU, roughly: a fixed part (the sessions the
    checks make) and one that grows with the graph (the bundled 63 MB voice took 14–18 s on
    a laptop, the 2 MB test voices 5–8 s; a busy box takes several times as long)."""
    try:
        mb = model_path.stat().st_size / 1e6
    except OSError:
        mb = 0.0
    return max(1, round(5 + mb * 0.17))


PIPER_INPUTS = frozenset({"input", "input_lengths", "scales"})
"""The graph inputs every Piper VITS voice has (multi-speaker ones also ``sid``)."""


def check_graph(model_path: Path, info: VoiceInfo) -> ModelFacts:
    """The graph's sizes; VoiceError unless ``model_path`` parses as ONNX with Piper's
    inputs (no session)."""
    import onnx

    try:
        graph = onnx.load(str(model_path), load_external_data=False).graph
    except Exception as exc:  # protobuf's DecodeError and OSError: a truncated or foreign file
        why = " ".join(str(exc).split())[:200]
        raise VoiceError(f"not an ONNX model ({why})") from None
    inputs = {i.name for i in graph.input}
    if not PIPER_INPUTS <= inputs or not graph.output:
        missing = ", ".join(sorted(PIPER_INPUTS - inputs)) or "an output"
        raise VoiceError(f"not a Piper voice (no {missing})")
    if info.num_speakers > 1 and "sid" not in inputs:
        raise VoiceError(f"the config has {info.num_speakers} speakers, the graph no sid")
    return ModelFacts.of_graph(graph)


class _Preparation:
    """A voice cut for the first time, stage after stage (each one's outcome and note in
    attributes, the whole written to the cache's ``meta.json`` at the end):

    split (encoder and decoder, by pattern) → verify the split (else whole-sentence) →
    split the flow (windowed, else the encoder whole) → the least decoder context that
    passes → the decoder's margins cropped → the 2-D decoder for windows decoded ahead.
    """

    def __init__(self, info: VoiceInfo, model_path: Path, digest: str, slot: Path) -> None:
        self.info, self.model_path, self.digest, self.slot = info, model_path, digest, slot
        self.names: CutNames | None = None
        self.enc: Path | None = None
        self.dec: Path | None = None
        self.ok = False
        self.note = ""
        self.flow: FlowSplit | None = None
        self.flow_note = ""
        self.context = DEFAULT_CONTEXT
        self.keep: int | None = None
        self.margins: Path | None = None
        self.margins_note = ""
        self.lean: Path | None = None
        self.lean_note = ""
        self._graph: Any = None
        self._probe: Probe | None = None
        self._reference = Reference(info, model_path)

    def run(self) -> Voice:
        name = self.info.name
        try:
            self.split()
        except (VoiceError, ValueError, OSError) as exc:
            log.warning("voice %s: cannot split (%s); running whole-sentence", name, exc)
            self.names = self.enc = self.dec = None
            return self.voice(f"cannot split: {exc}")
        self.verify_split()
        if self.ok:
            self.split_flow()
            self.find_context()
            self.crop_margins()
            self.lift_2d()
        self.write_meta()
        return self.voice(self.note)

    def split(self) -> None:
        import onnx

        self._graph = onnx.load(str(self.model_path), load_external_data=False)
        self.names = find_cut(self._graph)
        self._probe = probe_feeds(self.info)
        self.enc, self.dec = cut_model(self.model_path, self.slot, self.names, self._probe)

    def verify_split(self) -> None:
        assert self.enc is not None and self.dec is not None and self.names is not None
        self.ok, self.note = verify_cut(self._reference, self.enc, self.dec, self.names)
        if self.ok:
            log.debug("voice %s: split verified (%s)", self.info.name, self.note)
        else:
            log.warning(
                "voice %s: split check failed (%s); running whole-sentence",
                self.info.name,
                self.note,
            )

    def split_flow(self) -> None:
        assert self.dec is not None and self.names is not None
        info, path = self.info, self.model_path
        try:
            self.names = find_flow(self._graph, self.names)
            flow = cut_flow(path, self.slot, self.names, self._probe)
        except (VoiceError, ValueError, OSError) as exc:
            self.flow_note = f"cannot split the flow: {exc}"
        else:
            flow_ok, self.flow_note = verify_flow(self._reference, self.dec, self.names, flow)
            if not flow_ok and crops_margins(flow.flow_path):
                flow = cut_flow(path, self.slot, self.names, self._probe, crop=False)
                flow_ok, whole_note = verify_flow(self._reference, self.dec, self.names, flow)
                self.flow_note = f"margins cropped: {self.flow_note}; whole: {whole_note}"
            self.flow = flow if flow_ok else None
        shape = "windowed" if self.flow else "whole"
        log.debug("voice %s: flow %s (%s)", info.name, shape, self.flow_note)

    @property
    def _first(self) -> Path | FlowSplit:
        """What the checks run before the decoder: the flow split, or the encoder."""
        assert self.enc is not None
        return self.flow or self.enc

    @property
    def _decoder_cut(self) -> DecoderCut:
        """The verified cut at its context, for the decoder rewrites' checks."""
        assert self.dec is not None and self.names is not None
        first, context = self._first, self.context
        return DecoderCut(self._reference, self.dec, self.names, first, context, self.slot)

    def find_context(self) -> None:
        assert self.dec is not None and self.names is not None
        self.context, note = smallest_context(self._reference, self.dec, self.names, self._first)
        log.debug("voice %s: decoder context %d frames (%s)", self.info.name, self.context, note)

    def crop_margins(self) -> None:
        self.keep, self.margins, self.margins_note = margin_decoder(self._decoder_cut)
        kept = f"cropped to {self.keep} frame(s)" if self.keep is not None else "not cropped"
        log.debug("voice %s: decoder margins %s (%s)", self.info.name, kept, self.margins_note)

    def lift_2d(self) -> None:
        self.lean, self.lean_note = lean_decoder(self._decoder_cut, self.keep)
        used = "used" if self.lean else "not used"
        log.debug("voice %s: 2-D decoder %s (%s)", self.info.name, used, self.lean_note)

    def write_meta(self) -> None:
        assert self.names is not None
        meta = {
            "sha256": self.digest,
            "ok": self.ok,
            "note": self.note,
            "flow_ok": self.flow is not None,
            "flow_note": self.flow_note,
            "cut": dataclasses.asdict(self.names),
            "context_frames": self.context,
            "lean_ok": self.lean is not None,
            "lean_note": self.lean_note,
            "margins_ok": self.margins is not None,
            "margins_keep": self.keep,
            "margins_note": self.margins_note,
        }
        # Last, and whole or not at all: without it the next start cuts again.
        atomic.write_bytes(self.slot / "meta.json", json.dumps(meta, indent=1).encode())

    def voice(self, note: str) -> Voice:
        return Voice(
            self.info,
            self.model_path,
            self.digest,
            self.enc,
            self.dec,
            self.names,
            self.ok,
            note,
            flow_split=self.flow,
            lean_decoder_path=self.lean,
            context_frames=self.context,
            margin_decoder_path=self.margins,
        )
