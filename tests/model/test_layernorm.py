"""Exported layer norms fused into single nodes: the same outputs, fewer nodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from appliance.model.constants import fold_constants
from appliance.model.layernorm import LAYER_NORM_OPSET, fuse_layer_norms
from appliance.model.voices import bundled_voice_path, load_voice
from tests.fixtures import GERMAN, voice_path


def _exported_layer_norm(exponent: float = 2.0) -> onnx.ModelProto:
    """VITS's channel layer norm as the exporter writes it at opset 15, then a Conv."""
    rng = np.random.default_rng(11)
    c = 6

    def t(name: str, value: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(value.astype(np.float32), name)

    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("ReduceMean", ["xt"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["xt", "mean"], ["centred"]),
        helper.make_node("Pow", ["centred", "two"], ["squared"]),
        helper.make_node("ReduceMean", ["squared"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["centred", "std"], ["normed"]),
        helper.make_node("Mul", ["normed", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["shifted"]),
        helper.make_node("Transpose", ["shifted"], ["back"], perm=[0, 2, 1]),
        helper.make_node("Conv", ["back", "w"], ["y"], kernel_shape=[3], pads=[1, 1]),
    ]
    inits = [
        t("two", np.array(exponent)),
        t("eps", np.array(1e-5)),
        t("gamma", rng.standard_normal(c)),
        t("beta", rng.standard_normal(c)),
        t("w", rng.standard_normal((c, c, 3))),
    ]
    graph = helper.make_graph(
        nodes,
        "ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, "T"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(None, {"x": x})[0]
    return out


def test_an_exported_layer_norm_becomes_one_node_with_the_same_output() -> None:
    model = _exported_layer_norm()
    fused, count = fuse_layer_norms(model)
    assert count == 1
    ops = [n.op_type for n in fused.graph.node]
    assert ops == ["Transpose", "LayerNormalization", "Transpose", "Conv"]
    assert {o.version for o in fused.opset_import if o.domain == ""} == {LAYER_NORM_OPSET}
    # The exponent and epsilon went with the nodes that used them.
    assert {t.name for t in fused.graph.initializer} == {"gamma", "beta", "w"}
    onnx.checker.check_model(fused)
    x = np.random.default_rng(2).standard_normal((1, 6, 13)).astype(np.float32)
    np.testing.assert_allclose(_run(fused, x), _run(model, x), atol=1e-5)
    assert len(model.graph.node) == 12  # the original is left as it was


def test_a_pattern_that_is_not_a_layer_norm_stays() -> None:
    model = _exported_layer_norm(exponent=3.0)
    same, count = fuse_layer_norms(model)
    assert count == 0 and same is model


def _conv_ranks(path: Path) -> list[int]:
    model = onnx.load(str(path))
    weights = {t.name: len(t.dims) for t in model.graph.initializer}
    return [weights[n.input[1]] for n in model.graph.node if n.op_type == "Conv"]


def test_the_daemons_prior_and_flow_are_the_rewritten_ones(voice_cache: Path) -> None:
    """The prior the cut writes (and Runtime.load reads) has the bundled voice's 36 layer
    norms as single nodes, and the prior and the flow run every convolution 2-D; the
    voice still passed the cut's check against the fused model."""
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.flow_split is not None and voice.split_ok
    ops = [n.op_type for n in onnx.load(str(voice.flow_split.prior_path)).graph.node]
    assert ops.count("LayerNormalization") == 36
    assert "ReduceMean" not in ops
    assert _conv_ranks(voice.flow_split.prior_path) == [4] * 69
    assert _conv_ranks(voice.flow_split.flow_path) == [4] * 40


def test_fused_layer_norms_that_change_the_outputs_are_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the German test voice (tests/fixtures/voices: a cut in a few seconds, the bundled
    voice's took 15-25 s): the check the cut makes is the same, and there as on the bundled
    voice the fused nodes' changed outputs change the durations too."""
    import appliance.model.layernorm

    real = appliance.model.layernorm.fuse_layer_norms

    def off(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
        fused, count = real(model)
        for node in fused.graph.node:
            for a in node.attribute:
                if node.op_type == "LayerNormalization" and a.name == "epsilon":
                    a.f = 1.0  # a different normalisation: outputs move far off
        return fused, count

    monkeypatch.setattr(appliance.model.layernorm, "fuse_layer_norms", off)
    voice = load_voice(GERMAN, voice_path(GERMAN), tmp_path)
    assert voice.split_ok and voice.flow_split is not None
    prior = onnx.load(str(voice.flow_split.prior_path))
    assert "LayerNormalization" not in [n.op_type for n in prior.graph.node]
    # Every layer norm of the voice the fusion finds (once its constants are folded, as
    # the cut does) is in the prior as exported.
    _, in_the_voice = real(fold_constants(onnx.load(str(voice_path(GERMAN))))[0])
    assert in_the_voice >= 1
    assert real(prior)[1] == in_the_voice
    # The convolutions alone still passed: they are kept without the layer norms.
    ranks = _conv_ranks(voice.flow_split.prior_path)
    assert ranks and set(ranks) == {4}
