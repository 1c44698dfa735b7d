"""A graph as ONNX Runtime optimised it, its element-wise operators kept in the blocked
layout: the same floats, fewer layout conversions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from appliance.model.margins import read_crops
from appliance.model.nchwc import NCHWC, fold_sums, keep_blocked
from appliance.model.voices import bundled_voice_path, load_voice
from tests.fakes.graphs import toy_decoder


def _optimised(source: Path, tmp: Path) -> Path:
    """``source`` as ONNX Runtime's every pass (NCHWc included) leaves it, on this machine."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.optimized_model_filepath = str(tmp / "optimised.onnx")
    opts.log_severity_level = 3
    ort.InferenceSession(str(source), sess_options=opts, providers=["CPUExecutionProvider"])
    return tmp / "optimised.onnx"


def _as_is(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])


def _largest_difference(optimised: Path, rewritten: onnx.ModelProto, z: str) -> float:
    """The most a sample of ``rewritten`` differs from ``optimised``'s at 1, 12 and 70
    frames, with and without margins cropped inside."""
    before, after = _as_is(optimised), _as_is(rewritten)
    crops = read_crops(before.get_modelmeta().custom_metadata_map)
    assert crops is not None
    rng = np.random.default_rng(11)
    largest = 0.0
    for frames, margins in ((1, (0, 0)), (12, (4, 0)), (70, (10, 10))):
        feeds = {z: rng.standard_normal((1, 192, frames)).astype(np.float32)}
        feeds.update(crops.feeds(frames, *margins)[0])
        want, got = before.run(None, feeds)[0], after.run(None, feeds)[0]
        assert want.shape == got.shape
        largest = max(largest, float(np.max(np.abs(want - got))))
    return largest


def _reorders(model: onnx.ModelProto) -> int:
    return sum(n.domain == NCHWC and n.op_type.startswith("Reorder") for n in model.graph.node)


def test_the_bundled_2d_decoder_gives_the_same_samples_bit_for_bit(
    voice_cache: Path, tmp_path: Path
) -> None:
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.lean_decoder_path is not None and voice.cut is not None
    optimised = _optimised(voice.lean_decoder_path, tmp_path)
    model, saved = keep_blocked(onnx.load(str(optimised)))
    # Two per residual convolution (out of the blocks and back) at least, per upsampling.
    assert saved >= 18
    assert _reorders(model) == _reorders(onnx.load(str(optimised))) - saved
    assert not any(
        n.op_type in ("LeakyRelu", "Add") and "__nchwc" not in n.output[0]
        for n in model.graph.node
        if n.op_type != "Slice"
    )
    assert _largest_difference(optimised, model, voice.cut.z) == 0.0


def test_the_bundled_decoders_residual_sums_fold_into_its_convolutions(
    voice_cache: Path, tmp_path: Path
) -> None:
    """Each residual ``Add`` done by the convolution before it: within 1e-6 of ONNX
    Runtime's graph (another order of three additions), at every window size."""
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.lean_decoder_path is not None and voice.cut is not None
    optimised = _optimised(voice.lean_decoder_path, tmp_path)
    blocked, _ = keep_blocked(onnx.load(str(optimised)))
    folded, sums = fold_sums(blocked)
    # Three resblocks of three dilated pairs at each of two upsamplings.
    assert sums == 18

    def count(model: onnx.ModelProto, op: str) -> int:
        return sum(n.op_type == op for n in model.graph.node)

    assert count(folded, "Add") == count(blocked, "Add") - sums
    summing = [n for n in folded.graph.node if n.domain == NCHWC and len(n.input) == 4]
    assert len(summing) == sums and not any(
        a.name == "activation" for n in summing for a in n.attribute
    )
    assert _largest_difference(optimised, folded, voice.cut.z) <= 1e-6


def _upsampling(conditioned: bool) -> onnx.ModelProto:
    """An upsampling and two residual layers, HiFi-GAN's shape; ``conditioned``: on a
    speaker's vector ``g`` [1, 32, 1, 1], broadcast over time, through a 1×1 convolution:

    up = ConvT(x); h = up + Conv(g) (or up × 0.5); r = h + Conv(LeakyRelu(h));
    y = r + Conv(LeakyRelu(r))."""
    rng = np.random.default_rng(4)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node(
            "ConvTranspose",
            ["x", "wu"],
            ["up"],
            kernel_shape=[1, 4],
            strides=[1, 2],
            pads=[0, 1, 0, 1],
        ),
        helper.make_node("Conv", ["g", "wg"], ["cond"], kernel_shape=[1, 1]),
        helper.make_node(
            "Add" if conditioned else "Mul", ["up", "cond" if conditioned else "half"], ["h"]
        ),
    ]
    for into, out in (("h", "r"), ("r", "y")):
        nodes += [
            helper.make_node("LeakyRelu", [into], [f"{into}_l"], alpha=0.1),
            helper.make_node(
                "Conv",
                [f"{into}_l", f"w{out}", f"b{out}"],
                [f"{into}_c"],
                kernel_shape=[1, 3],
                pads=[0, 1, 0, 1],
            ),
            helper.make_node("Add", [f"{into}_c", into], [out]),
        ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 1, "T"])]
    inits = [
        w("wu", 32, 32, 1, 4),
        w("wr", 32, 32, 1, 3),
        w("br", 32),
        w("wy", 32, 32, 1, 3),
        w("by", 32),
    ]
    if conditioned:
        inputs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 32, 1, 1]))
        inits.append(w("wg", 32, 32, 1, 1))
    else:
        nodes = [n for n in nodes if n.output[0] != "cond"]
        inits.append(numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"))
    graph = helper.make_graph(
        nodes,
        "upsampling",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, "T2"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_conditioning_broadcast_over_time_stays_in_the_plain_layout(tmp_path: Path) -> None:
    """Blocked, ``up + cond`` would read a [1, 32, 1, 1] vector against [1, 32, 1, T] in the
    wrong order: that ``Add`` keeps the plain layout, and with it all that follows."""
    source = tmp_path / "conditioned.onnx"
    onnx.save(_upsampling(conditioned=True), str(source))
    with pytest.raises(ValueError, match="no layout conversion"):
        keep_blocked(onnx.load(str(_optimised(source, tmp_path))))
    # Scaled by a scalar instead, the same layers run blocked throughout, with the same floats.
    source = tmp_path / "scaled.onnx"
    onnx.save(_upsampling(conditioned=False), str(source))
    optimised = _optimised(source, tmp_path)
    model, saved = keep_blocked(onnx.load(str(optimised)))
    assert saved >= 2
    x = np.random.default_rng(2).standard_normal((1, 32, 1, 9)).astype(np.float32)
    want = _as_is(optimised).run(None, {"x": x})[0]
    assert np.array_equal(_as_is(model).run(None, {"x": x})[0], want)
    # Both residual adds fold; the scalar product does not.
    folded, sums = fold_sums(model)
    assert sums == 2 and sum(n.op_type == "Mul" for n in folded.graph.node) == 1
    got = _as_is(folded).run(None, {"x": x})[0]
    assert float(np.max(np.abs(got - want))) <= 1e-6 * float(np.max(np.abs(want)))


def test_a_graph_without_blocked_convolutions_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "toy1d.onnx"
    onnx.save(toy_decoder(), str(source))  # 1-D: ONNX Runtime keeps it plain
    with pytest.raises(ValueError, match="no layout conversion"):
        keep_blocked(onnx.load(str(_optimised(source, tmp_path))))
