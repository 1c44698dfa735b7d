"""``Constant`` nodes moved into the graph's initializers.

Newer exporters (torch ≥ 2.1's TorchScript path, which made the test voices) write every
scalar and shape as a ``Constant`` node; torch 2.0 (the bundled voice) wrote initializers.
The rewrites that speed a voice up (:mod:`appliance.model.layernorm`, :mod:`appliance.model.conv2d`)
read their weights and scalars from initializers and refuse a graph with a node they do
not know, so the cut folds the constants first.  It changes no value: an initializer is
what a ``Constant`` node's output is, without the node.  Pure, no state; the graph is
copied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx


def _value(node: onnx.NodeProto) -> np.ndarray | None:
    """The array a Constant node outputs, None for a kind this does not fold (sparse)."""
    from onnx import numpy_helper

    for attr in node.attribute:
        if attr.name == "value":
            return np.asarray(numpy_helper.to_array(attr.t))
        if attr.name == "value_float":
            return np.array(attr.f, dtype=np.float32)
        if attr.name == "value_int":
            return np.array(attr.i, dtype=np.int64)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), dtype=np.float32)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), dtype=np.int64)
    return None


def fold_constants(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with its top-level Constant nodes as initializers, and how many
    were folded (a graph output made by a Constant stays a node)."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    outputs = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    folded = 0
    for node in graph.node:
        constant = node.op_type == "Constant" and node.domain in ("", "ai.onnx")
        value = _value(node) if constant else None
        if value is None or node.output[0] in outputs:
            kept.append(node)
            continue
        graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        folded += 1
    del graph.node[:]
    graph.node.extend(kept)
    return out, folded
