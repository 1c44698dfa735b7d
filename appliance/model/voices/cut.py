"""Cutting a voice: the parts found by pattern, written to the cache, rewritten for speed."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from appliance.model import graphs
from appliance.model.voices.discover import VoiceError
from appliance.ops import atomic
from appliance.text.phonemize import Phonemizer
from appliance.voicetypes import CutNames, FlowSplit, VoiceInfo

log = logging.getLogger("appliance.model.voices")


CUT_TOLERANCE = 1e-4
VERIFY_SENTENCE = "Testing one two three, the quick brown fox jumps over the lazy dog."


def sha256_of(path: Path) -> str:
    """The model's digest, what its cut's cache is keyed by (a regular file, bounded)."""
    from appliance.model.voices.pair import digest_of

    return digest_of(path)


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
    consumers = graphs.consumers(graph)
    # Tensors that change with the inputs (not folded constants).
    inputs = {i.name for i in graph.input}
    dynamic = inputs | {o for n in graphs.descendant_nodes(graph, inputs) for o in n.output}
    # Tensors computed from the speaker conditioning alone (the flow's per-layer
    # projections of g): the flow part computes them from g, its input.
    from_g = {names.g} if names.g else set()
    for node in graph.node:
        moving = [i for i in node.input if i in dynamic]
        if from_g and moving and all(i in from_g for i in moving):
            from_g.update(node.output)
    producers = graphs.producers(graph)
    before_durations = graphs.ancestors(producers, names.durations)
    upstream_of_z = graphs.ancestors(producers, names.z)
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
        after = graphs.descendant_nodes(graph, [z_p])
        flow = [n for n in after if n.output[0] in upstream_of_z]
        inside = {o for n in flow for o in n.output} | {z_p}
        outside = {
            i
            for n in flow
            for i in n.input
            if i and i not in inside and i not in initializers and i in dynamic
        } - from_g
        if len(outside) == 1:  # the frame mask
            reach = sum(_conv_reach(n, initializers) for n in flow if n.op_type == "Conv")
            found.append((z_p, outside.pop(), reach))
    if len(found) != 1:
        raise VoiceError(f"expected one flow input (noise added to the prior), found {len(found)}")
    z_p, mask, reach = found[0]
    return dataclasses.replace(names, z_p=z_p, mask=mask, flow_context=reach)


def _load_shaped(model_path: Path) -> Any:
    """The voice's graph with its Constant nodes folded (:mod:`appliance.model.constants`)
    and every intermediate tensor's type inferred: onnx's Extractor looks the cut tensors
    up in ``value_info``, which newer exporters (torch ≥ 2.1's TorchScript path, as the
    test voices) leave empty; without it no cut is possible."""
    import onnx
    import onnx.shape_inference

    from appliance.model.constants import fold_constants

    folded, _ = fold_constants(onnx.load(str(model_path)))
    return onnx.shape_inference.infer_shapes(folded)


def _atomic_write_model(model: Any, dest: Path) -> None:
    """Whole or not at all (:mod:`appliance.ops.atomic`): a daemon stopped mid-cut leaves no
    part of a graph in the cache."""
    import onnx

    with atomic.writing(dest) as f:
        onnx.save(model, f)


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
"""Inputs of the encoder for one sentence with zero noise (see :func:`probe_feeds`)."""


def probe_feeds(info: VoiceInfo) -> Probe:
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


def _rewrites(model: Any, already: str) -> list[tuple[Any, str]]:
    """``model`` with its layer norms fused and its convolutions 2-D, with either, and as
    it is, each with a note of what was done (``already``: what was done before)."""
    from appliance.model.conv2d import wrap_convs
    from appliance.model.layernorm import fuse_layer_norms

    fused, norms = fuse_layer_norms(model)
    both, convs = wrap_convs(fused)
    wrapped, _ = wrap_convs(model)
    norms_note = f"{norms} layer norms fused" if norms else ""
    convs_note = f"{convs} convolutions 2-D"

    def note(*done: str) -> str:
        return ", ".join(d for d in (already, *done) if d)

    return [
        (both, note(norms_note, convs_note)),
        (fused, note(norms_note)),
        (wrapped, note(convs_note)),
        (model, already),
    ]


def _optimised(
    model: Any, feeds: Probe | None, what: str, want: list[np.ndarray] | None = None
) -> Any:
    """``model`` with its relative attention banded (:mod:`appliance.model.relattn`), its
    layer norms fused (:mod:`appliance.model.layernorm`) and its convolutions run 2-D
    (:func:`appliance.model.conv2d.wrap_convs`): the first of those combinations, all of
    them first, whose outputs stay within :data:`CUT_TOLERANCE` of the original's on
    ``feeds`` (``want``: those outputs, when the caller has them already).  Without
    ``feeds`` nothing can be checked: ``model`` as it is."""
    from appliance.model.relattn import band_relative_attention

    if feeds is None:
        return model
    banded, bands = band_relative_attention(model)
    candidates = _rewrites(banded, f"{bands} attention layers banded") if bands else []
    candidates += _rewrites(model, "")
    if want is None:
        try:
            want = _run_graph(model, feeds)
        except Exception as exc:  # onnxruntime's own exception types are not exported
            log.debug("%s left as exported: %s", what, exc)
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
            log.debug("%s: %s failed to run: %s", what, note, exc)
            continue
        if worst <= CUT_TOLERANCE:
            log.debug("%s: %s (max abs difference %.2e)", what, note, worst)
            return candidate
        log.debug("%s: %s left out (max abs difference %.2e)", what, note, worst)
    return model


def cut_model(
    model_path: Path, out_dir: Path, names: CutNames, probe: Probe | None = None
) -> tuple[Path, Path]:
    """Write the encoder and decoder halves; with ``probe``, the encoder rewritten for
    speed where that keeps its outputs (:func:`_optimised`)."""
    import onnx
    import onnx.utils

    out_dir.mkdir(parents=True, exist_ok=True)
    atomic.sweep(out_dir)  # what a cut killed outright (SIGKILL) left half-written
    enc, dec = out_dir / "encoder.onnx", out_dir / "decoder.onnx"
    model = _load_shaped(model_path)
    enc_outputs = [names.z, names.durations] + ([names.g] if names.g else [])
    dec_inputs = [names.z] + ([names.g] if names.g else [])
    extractor = onnx.utils.Extractor(model)
    encoder = extractor.extract_model(list(names.inputs), enc_outputs)
    decoder = extractor.extract_model(dec_inputs, [names.output])
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
    model = _load_shaped(model_path)
    extra = [names.g] if names.g else []
    extractor = onnx.utils.Extractor(model)
    prior = extractor.extract_model(list(names.inputs), [names.z_p, names.durations, *extra])
    flow = extractor.extract_model([names.z_p, names.mask, *extra], [names.z])
    split = FlowSplit(out_dir / "prior.onnx", out_dir / "flow.onnx")
    flow_feeds: Probe | None = None
    prior_out: list[np.ndarray] | None = None
    if probe is not None:
        try:
            prior_out = _run_graph(prior, probe)
        except Exception as exc:  # onnxruntime's own exception types are not exported
            log.debug("prior does not run on the probe: %s", exc)
            probe = None  # nothing to check the prior's rewrites against
        else:
            z_p, _durations, *g = prior_out
            flow_feeds = {names.z_p: z_p, names.mask: np.ones((1, 1, z_p.shape[2]), np.float32)}
            if names.g and g:
                flow_feeds[names.g] = g[0]
    prior = _optimised(prior, probe, "prior", prior_out)
    if probe is not None:
        # The noise drawn by the daemon, so that a request can ask for the same audio
        # every time (appliance.model.noise); a prior of another form keeps its own.
        from appliance.model.noise import feed_noise

        try:
            fed = feed_noise(prior, names.z_p, probe)
        except Exception as exc:  # onnxruntime's own exception types are not exported
            log.info("prior: noise left in the graph: %s", exc)
            fed = None
        prior = fed if fed is not None else prior
    _atomic_write_model(prior, split.prior_path)
    flow = _optimised(flow, flow_feeds, "flow")
    if crop:
        try:
            flow = add_flow_margin_crops(flow, names.mask)
        except ValueError as exc:  # a flow of another shape: written whole
            log.debug("flow: margins not cropped: %s", exc)
    _atomic_write_model(flow, split.flow_path)
    return split


def crops_margins(path: Path) -> bool:
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
