"""The decoder rewritten with 2-D convolutions computes what the 1-D graph computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from appliance.model.conv2d import lift_to_2d, wrap_convs
from appliance.model.voices import bundled_voice_path, load_voice
from tests.fakes.graphs import toy_decoder


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
    )
    out: np.ndarray = session.run(None, feeds)[0]
    return out


def test_the_bundled_decoder_lifted_matches_the_1d_graph(voice_cache: Path) -> None:
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.decoder_path is not None and voice.cut is not None
    flat = onnx.load(str(voice.decoder_path))
    lifted = lift_to_2d(flat)
    assert sum(n.op_type == "Conv" for n in lifted.graph.node) >= 10
    rng = np.random.default_rng(7)
    for frames in (1, 8, 30):
        z = rng.standard_normal((1, 192, frames)).astype(np.float32)
        want = _run(flat, {voice.cut.z: z})
        got = _run(lifted, {voice.cut.z: z})
        assert got.shape == want.shape
        assert float(np.max(np.abs(got - want))) < 1e-5
    # The input keeps its name and rank: feeds do not change.
    assert [i.name for i in lifted.graph.input] == [i.name for i in flat.graph.input]


def test_constants_and_the_speaker_input_keep_their_broadcasting() -> None:
    flat = toy_decoder()
    lifted = lift_to_2d(flat)
    rng = np.random.default_rng(5)
    feeds = {
        "x": rng.standard_normal((1, 4, 11)).astype(np.float32),
        "g": rng.standard_normal((1, 3, 1)).astype(np.float32),
    }
    want = _run(flat, feeds)
    got = _run(lifted, feeds)
    assert want.shape == got.shape == (1, 2, 22)
    assert float(np.max(np.abs(got - want))) < 1e-5


def test_an_operator_the_rewrite_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="Transpose"):
        lift_to_2d(toy_decoder("transpose"))


def test_each_convolution_wrapped_alone_gives_the_same_output() -> None:
    """A grouped (depthwise) and a dilated convolution are wrapped; one whose weight an
    element-wise node also reads keeps its 1-D shape; the graph's other operators stay."""
    rng = np.random.default_rng(9)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "dw", "db"], ["a"], kernel_shape=[3], pads=[1, 1], group=4),
        helper.make_node("Transpose", ["a"], ["at"], perm=[0, 2, 1]),
        helper.make_node("Transpose", ["at"], ["ab"], perm=[0, 2, 1]),
        helper.make_node("Conv", ["ab", "wd"], ["b"], kernel_shape=[3], pads=[2, 2], dilations=[2]),
        helper.make_node("Conv", ["b", "shared"], ["c"], kernel_shape=[1]),
        helper.make_node("Add", ["shared", "shared"], ["twice"]),
        helper.make_node("Conv", ["c", "twice"], ["y"], kernel_shape=[1]),
    ]
    inits = [w("dw", 4, 1, 3), w("db", 4), w("wd", 4, 4, 3), w("shared", 4, 4, 1)]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "T"])],
        inits,
    )
    flat = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    wrapped, count = wrap_convs(flat)
    assert count == 2  # the depthwise and the dilated one; "shared" is read by the Add
    onnx.checker.check_model(wrapped)
    ops = [n.op_type for n in wrapped.graph.node]
    assert ops.count("Unsqueeze") == ops.count("Squeeze") == 2 and ops.count("Transpose") == 2
    x = rng.standard_normal((1, 4, 17)).astype(np.float32)
    np.testing.assert_allclose(_run(wrapped, {"x": x}), _run(flat, {"x": x}), atol=1e-5)
    assert wrap_convs(toy_decoder("transpose"))[1] == 2  # any graph: nothing refused
