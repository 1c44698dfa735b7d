"""Sampling noise the daemon draws itself: the same audio for the same text.

A Piper VITS prior draws two noises with ``RandomNormalLike`` nodes: one in the
stochastic duration predictor (``noise_w``; shape [1, 2, ids], known from the input),
one added to the prior's mean (``z_p = m + ε · exp(logs) · noise_scale``; shape
[1, C, frames], known only once the durations are).  ONNX Runtime seeds them per
session, so every request differs.  :func:`feed_noise` rewrites a cut prior:

- the duration predictor's node becomes a graph input (``noise_dp0`` …, its shape in the
  model's metadata with ``"ids"`` where it follows the phoneme count);
- the prior also outputs ``noise_mean`` (m) and ``noise_std`` (exp(logs) · noise_scale),
  so ``z_p`` can be drawn outside the graph once its length is known.  The graph's own
  ``z_p`` (ONNX Runtime's noise) stays for requests that do not ask for determinism;
- and ``durations_unrounded``, the input of its one ``Ceil`` (frames before rounding up),
  so a speed can be met exactly by re-timing (:mod:`appliance.model.retime`).

:class:`NoiseFeed` (used by the ONNX engine) feeds a call: with a seed, every draw comes
from one generator seeded by :func:`call_seed` — the request's seed, the clause's phoneme
ids, its scales and speaker — so a phrase gets the same noise every time it is said,
and different phrases different noise, of the same distribution as ONNX Runtime's
(``noise_scale`` unchanged: not the flat ``noise_scale: 0``).  Without a seed the
duration noise comes from fresh OS entropy, as ONNX Runtime's did.  The flow and the
decoder are untouched, so windowed decoding stays exact.  No state across calls.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.model import graphs
from appliance.speech import FloatArray, IntArray

METADATA_KEY = "ttsd.noise"
MEAN, STD = "noise_mean", "noise_std"
UNROUNDED = "durations_unrounded"


def _default_normal(node: Any) -> bool:
    import onnx

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return float(attrs.get("mean", 0.0)) == 0.0 and float(attrs.get("scale", 1.0)) == 1.0


def _prior_chain(graph: Any, node: Any, z_p: str) -> tuple[str, str, str] | None:
    """(mean, exp(logs), scale) when ``node``'s noise reaches ``z_p`` as
    ``Add(m, Mul(Mul(ε, e), s))`` (operands in any order)."""
    consumers = graphs.consumers(graph)
    t = node.output[0]
    factors = []
    for _ in range(2):
        muls = [c for c in consumers.get(t, []) if c.op_type == "Mul"]
        if len(muls) != 1:
            return None
        other = [i for i in muls[0].input if i != t]
        if len(other) != 1:
            return None
        factors.append(other[0])
        t = muls[0].output[0]
    adds = [c for c in consumers.get(t, []) if c.op_type == "Add" and c.output[0] == z_p]
    if len(adds) != 1:
        return None
    mean = [i for i in adds[0].input if i != t]
    return (mean[0], factors[0], factors[1]) if len(mean) == 1 else None


def _like_shapes(model: Any, nodes: list[Any], probe: dict[str, np.ndarray]) -> list[list[int]]:
    """The shapes the noise nodes draw on the probe sentence."""
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in nodes:
        m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n.output[0]))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in m.graph.input}
    outs = session.run([n.output[0] for n in nodes], {k: v for k, v in probe.items() if k in names})
    return [list(o.shape) for o in outs]


def feed_noise(model: Any, z_p: str, probe: dict[str, np.ndarray]) -> Any | None:
    """``model`` (a cut prior ending in ``z_p``) rewritten as the module doc says, or
    None when its noise is not of the expected form (the voice then has no seeded noise)."""
    import onnx

    graph = model.graph
    rnl = [n for n in graph.node if n.op_type == "RandomNormalLike"]
    if not rnl or not all(_default_normal(n) for n in rnl):
        return None
    chains = {id(n): _prior_chain(graph, n, z_p) for n in rnl}
    prior = [n for n in rnl if chains[id(n)] is not None]
    others = [n for n in rnl if chains[id(n)] is None]
    if len(prior) != 1:
        return None
    n_ids = int(probe["input"].shape[-1])
    shapes = _like_shapes(model, others, probe)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    drop = {n.output[0] for n in others}
    kept = [n for n in g.node if not (n.op_type == "RandomNormalLike" and n.output[0] in drop)]
    inputs = []
    for k, (node, shape) in enumerate(zip(others, shapes, strict=True)):
        name = f"noise_dp{k}"
        dims: list[int | str] = ["ids" if d == n_ids else int(d) for d in shape]
        g.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, dims))
        kept.append(onnx.helper.make_node("Identity", [name], [node.output[0]]))
        inputs.append({"input": name, "shape": dims})
    chain = chains[id(prior[0])]
    assert chain is not None
    mean, e, s = chain
    kept.append(onnx.helper.make_node("Identity", [mean], [MEAN]))
    kept.append(onnx.helper.make_node("Mul", [e, s], [STD]))
    outputs = [MEAN, STD]
    ceils = [n for n in g.node if n.op_type == "Ceil"]
    if len(ceils) == 1:
        kept.append(onnx.helper.make_node("Identity", [ceils[0].input[0]], [UNROUNDED]))
        outputs.append(UNROUNDED)
    del g.node[:]
    g.node.extend(kept)
    for name in outputs:
        g.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    meta = out.metadata_props.add()
    meta.key = METADATA_KEY
    meta.value = json.dumps({"dp": inputs, "unrounded": UNROUNDED in outputs})
    return out


def call_seed(seed: int, ids: IntArray, scales: FloatArray, speaker: int | None) -> int:
    """One call's seed: the request's, the clause's ids, its scales and speaker."""
    h = hashlib.blake2b(digest_size=8)
    h.update(seed.to_bytes(8, "little", signed=True))
    h.update(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(scales, dtype=np.float32).tobytes())
    h.update((-1 if speaker is None else speaker).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest(), "little")


@dataclass(frozen=True)
class NoiseFeed:
    """What a rewritten prior takes and gives (read from its metadata)."""

    dp: tuple[tuple[str, tuple[int | str, ...]], ...]
    unrounded: bool = False
    """The prior also gives its durations before rounding (:data:`UNROUNDED`)."""

    @classmethod
    def of(cls, metadata: dict[str, str]) -> NoiseFeed | None:
        text = metadata.get(METADATA_KEY)
        if text is None:
            return None
        d = json.loads(text)
        dp = tuple((i["input"], tuple(i["shape"])) for i in d["dp"])
        return cls(dp, bool(d.get("unrounded", False)))

    def inputs(self, n_ids: int, rng: np.random.Generator) -> dict[str, FloatArray]:
        """The duration predictor's noise for ``n_ids`` ids."""
        out = {}
        for name, dims in self.dp:
            shape = tuple(n_ids if d == "ids" else int(d) for d in dims)
            out[name] = rng.standard_normal(shape, dtype=np.float32)
        return out

    @staticmethod
    def z_p(mean: FloatArray, std: FloatArray, rng: np.random.Generator) -> FloatArray:
        """The prior's latent with this call's noise: ``m + ε · std``."""
        eps = rng.standard_normal(mean.shape, dtype=np.float32)
        return np.ascontiguousarray(mean + eps * std, dtype=np.float32)
