"""Fuse the layer norms a Piper encoder was exported with into single nodes.

VITS normalises over channels with ``x.transpose`` + ``F.layer_norm``, which the
exporter (opset 15) writes as nine nodes: ReduceMean, Sub, Pow, ReduceMean, Add,
Sqrt, Div, Mul, Add.  ONNX Runtime 1.32 leaves the bundled voice's 36 of them
unfused (its own fusion wants older operator versions), so the prior runs ~290
extra tiny nodes per clause.  Written as ``LayerNormalization`` (opset 17), the
short command's prior takes 1.4 ms less on one thread and 1.9 ms less on two
(docs/speed.md).  The cut keeps the fused graph only when its outputs match the
original's (:func:`appliance.model.voices.cut_model`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.model import graphs

if TYPE_CHECKING:
    import onnx

LAYER_NORM_OPSET = 17
"""The first ONNX opset with ``LayerNormalization``; 15 → 17 changes no operator a
Piper encoder uses (16 added bfloat16 types, ScatterND's optional reduction, and
RoiAlign's new default, which VITS does not use)."""

_CHANGED_IN_16 = frozenset({"RoiAlign", "GridSample"})


def fuse_layer_norms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with each exported layer norm (last axis) as one node, and how
    many were fused; the copy is ``model`` itself, unchanged, when there is none."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    if any(n.op_type in _CHANGED_IN_16 for n in graph.node):
        return model, 0
    if any(
        o.domain in ("", "ai.onnx") and o.version > LAYER_NORM_OPSET for o in model.opset_import
    ):
        return model, 0
    inits = {t.name: t for t in graph.initializer}
    consumers = graphs.consumers(graph)

    def only(name: str, op: str) -> onnx.NodeProto | None:
        c = consumers.get(name, [])
        return c[0] if len(c) == 1 and c[0].op_type == op else None

    def scalar(name: str) -> float | None:
        if name not in inits:
            return None
        a = numpy_helper.to_array(inits[name])
        return float(a.reshape(-1)[0]) if a.size == 1 else None

    def vector(name: str) -> bool:
        return name in inits and len(inits[name].dims) == 1

    def other(node: onnx.NodeProto, name: str) -> str:
        return str(node.input[1] if node.input[0] == name else node.input[0])

    fused: dict[int, onnx.NodeProto] = {}  # id of the last node → its replacement
    gone: set[int] = set()
    for mean in graph.node:
        axes = [list(a.ints) for a in mean.attribute if a.name == "axes"]
        if mean.op_type != "ReduceMean" or axes != [[-1]]:
            continue
        x = mean.input[0]
        sub = only(mean.output[0], "Sub")
        if sub is None or list(sub.input) != [x, mean.output[0]]:
            continue
        after_sub = consumers.get(sub.output[0], [])
        pow_ = next((n for n in after_sub if n.op_type == "Pow"), None)
        div = next((n for n in after_sub if n.op_type == "Div"), None)
        if len(after_sub) != 2 or pow_ is None or div is None or scalar(pow_.input[1]) != 2.0:
            continue
        var = only(pow_.output[0], "ReduceMean")
        if var is None or [list(a.ints) for a in var.attribute if a.name == "axes"] != [[-1]]:
            continue
        add_eps = only(var.output[0], "Add")
        eps = scalar(other(add_eps, var.output[0])) if add_eps is not None else None
        sqrt = only(add_eps.output[0], "Sqrt") if add_eps is not None else None
        if eps is None or sqrt is None or list(div.input) != [sub.output[0], sqrt.output[0]]:
            continue
        mul = only(div.output[0], "Mul")
        add = only(mul.output[0], "Add") if mul is not None else None
        if mul is None or add is None:
            continue
        gamma, beta = other(mul, div.output[0]), other(add, mul.output[0])
        if not (vector(gamma) and vector(beta)):
            continue
        fused[id(add)] = helper.make_node(
            "LayerNormalization",
            [x, gamma, beta],
            [add.output[0]],
            name=f"{mean.name}__layer_norm",
            axis=-1,
            epsilon=eps,
        )
        gone.update(id(n) for n in (mean, sub, pow_, var, add_eps, sqrt, div, mul))
    if not fused:
        return model, 0
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = [fused.get(id(n), n) for n in graph.node if id(n) not in gone]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    # The exponents and epsilons the fused nodes took with them (ONNX Runtime would
    # warn about each unused initializer every time a session loads the graph).
    graphs.prune_initializers(out.graph)
    for o in out.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = max(o.version, LAYER_NORM_OPSET)
    return out, len(fused)
