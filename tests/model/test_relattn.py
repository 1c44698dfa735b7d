"""Relative attention banded: the same audio as the exported graph at every length, and a
prior the daemon reads that has no products over the exporter's zero padding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from appliance.model.constants import fold_constants
from appliance.model.relattn import band_relative_attention
from appliance.model.voices import bundled_voice_path, load_voice
from tests.fixtures import GERMAN, voice_path

MULTI = "en_US-testmulti-x_low"


def _speak(model: onnx.ModelProto, ids: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        "input": ids.reshape(1, -1),
        "input_lengths": np.array([ids.size], np.int64),
        "scales": np.array([0.0, 1.0, 0.0], np.float32),  # no noise: one answer
    }
    if "sid" in {i.name for i in session.get_inputs()}:
        feeds["sid"] = np.array([1], np.int64)
    outs: list[np.ndarray] = session.run(None, feeds)
    return outs


def _reads_embeddings(model: onnx.ModelProto) -> bool:
    return any("emb_rel" in i for n in model.graph.node for i in n.input)


@pytest.mark.parametrize("name", [GERMAN, MULTI])
def test_a_banded_voice_speaks_as_exported_at_every_length(name: str) -> None:
    """Lengths under the window (the exporter slices its embeddings then), at it, and
    well over it: the audio of Piper's training code's voices, noise off, is the same."""
    model, _ = fold_constants(onnx.load(str(voice_path(name))))
    banded, count = band_relative_attention(model)
    assert count == 2  # the test voices' two attention layers
    assert _reads_embeddings(model) and not _reads_embeddings(banded)
    assert len(banded.graph.node) < len(model.graph.node)
    rng = np.random.default_rng(5)
    for n in (1, 2, 4, 5, 9, 10, 37):
        ids = rng.integers(1, 40, n).astype(np.int64)
        for want, got in zip(_speak(model, ids), _speak(banded, ids), strict=True):
            assert want.shape == got.shape
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{n} ids")


def test_per_head_embeddings_are_left_as_they_are() -> None:
    """The rewrite knows shared embeddings only (``heads_share``, VITS's default)."""
    model, _ = fold_constants(onnx.load(str(voice_path(GERMAN))))
    for t in model.graph.initializer:
        if t.name.endswith("emb_rel_k"):
            a = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(np.concatenate([a, a]), t.name))
    same, count = band_relative_attention(model)
    assert count == 0 and same is model


def test_the_daemons_prior_is_banded(voice_cache: Path) -> None:
    """The prior the cut writes for the bundled voice (and Runtime.load reads) has its six
    attention layers banded, and the voice still passed the cut's check."""
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.flow_split is not None and voice.split_ok
    prior = onnx.load(str(voice.flow_split.prior_path))
    assert not _reads_embeddings(prior)
    banded = [n for n in prior.graph.node if n.op_type == "MatMul" and n.name.startswith("/band")]
    assert len(banded) == 12  # the keys' and the values' products of six layers


def test_a_banding_that_changes_the_outputs_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import appliance.model.relattn

    real = appliance.model.relattn.band_relative_attention

    def off(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
        banded, count = real(model)
        for t in banded.graph.initializer:
            if t.name.endswith("emb_v"):
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) + 1.0, t.name))
        return banded, count

    monkeypatch.setattr(appliance.model.relattn, "band_relative_attention", off)
    voice = load_voice(GERMAN, voice_path(GERMAN), tmp_path)
    assert voice.split_ok and voice.flow_split is not None
    assert _reads_embeddings(onnx.load(str(voice.flow_split.prior_path)))
