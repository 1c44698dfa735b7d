"""Small ONNX graphs built in code, for the graph rewrites' tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def toy_decoder(extra: str | None = None) -> onnx.ModelProto:
    """Conv → + a [C, 1] bias → LeakyRelu → strided ConvTranspose → + the speaker's
    conditioning (a 1×1 Conv of g [N, 3, 1]) → × 0.5; the output comes from the last
    element-wise op, not from an Unsqueeze."""
    rng = np.random.default_rng(3)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Add", ["c1", "bias"], ["a1"]),
        helper.make_node("LeakyRelu", ["a1"], ["r1"], alpha=0.1),
        helper.make_node(
            "ConvTranspose", ["r1", "w2", "b2"], ["up"], kernel_shape=[4], strides=[2], pads=[1, 1]
        ),
        helper.make_node("Conv", ["g", "wg"], ["cond"], kernel_shape=[1]),
        helper.make_node("Add", ["up", "cond"], ["a2"]),
        helper.make_node("Mul", ["a2", "half"], ["y"]),
    ]
    if extra == "transpose":
        nodes.append(helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 1]))
    inits = [
        w("w1", 4, 4, 3),
        w("bias", 4, 1),
        w("w2", 4, 2, 4),
        w("b2", 2),
        w("wg", 2, 3, 1),
        numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
    ]
    out = "t" if extra == "transpose" else "y"
    graph = helper.make_graph(
        nodes,
        "toy",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "T"]),
            helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 3, 1]),
        ],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 2, "T2"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
