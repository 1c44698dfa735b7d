"""The cut on voices another exporter wrote (tests/fixtures/voices: torch 2.13, random
weights): no ``value_info``, scalars as ``Constant`` nodes, and a multi-speaker graph
with a ``sid`` input whose flow takes the speaker conditioning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from appliance.model.constants import fold_constants
from appliance.model.engine.base import Scales
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.voices import CUT_TOLERANCE, find_cut, load_voice
from appliance.model.voices.verify import CONTEXT_CANDIDATES
from appliance.text.phonemize import Phonemizer
from appliance.voicetypes import Voice
from tests.fixtures import GERMAN, MULTI, voice_path


@pytest.fixture(scope="module")
def voices(voice_cache: Path) -> dict[str, Voice]:
    return {n: load_voice(n, voice_path(n), voice_cache) for n in (MULTI, GERMAN)}


def test_the_graphs_are_what_the_other_exporter_writes() -> None:
    """What the findings were about: without these the tests below test nothing new."""
    for name in (MULTI, GERMAN):
        graph = onnx.load(str(voice_path(name))).graph
        assert not graph.value_info
        assert any(n.op_type == "Constant" for n in graph.node)
    assert "sid" in {i.name for i in onnx.load(str(voice_path(MULTI))).graph.input}


def test_the_cut_is_found_by_pattern_with_the_speaker_input() -> None:
    multi = find_cut(onnx.load(str(voice_path(MULTI))))
    assert "sid" in multi.inputs and multi.g is not None
    german = find_cut(onnx.load(str(voice_path(GERMAN))))
    assert "sid" not in german.inputs and german.g is None


@pytest.mark.parametrize("name", [MULTI, GERMAN])
def test_both_voices_stream_with_every_part_verified(voices: dict[str, Voice], name: str) -> None:
    v = voices[name]
    assert v.split_ok, v.split_note
    worst = float(v.split_note.rsplit(" ", 1)[-1])
    assert worst <= CUT_TOLERANCE
    assert v.flow_split is not None  # the flow split, g fed from the prior (multi)
    assert v.cut is not None and v.cut.flow_context > 0
    assert v.context_frames in CONTEXT_CANDIDATES and v.context_frames < max(CONTEXT_CANDIDATES)
    assert v.margin_decoder_path is not None  # windows' margins cropped
    assert v.lean_decoder_path is not None  # the 2-D lift, once the Constants are folded


def _model(v: Voice) -> OnnxVoiceModel:
    assert v.encoder_path and v.decoder_path and v.cut
    return OnnxVoiceModel.load(
        v.model_path,
        v.encoder_path,
        v.decoder_path,
        v.cut,
        threads=1,
        flow=v.flow_split,
        lean_decoder=v.lean_decoder_path,
    )


def test_each_speaker_is_its_own_and_the_same_one_repeats(voices: dict[str, Voice]) -> None:
    v = voices[MULTI]
    model = _model(v)
    ids = Phonemizer(v.info).ids("Hello there, this is a test.")
    quiet = Scales(0.0, 1.0, 0.0)
    audio = {sid: model.fused(ids, quiet, sid) for sid in range(4)}
    again = model.fused(ids, quiet, 2)
    assert np.array_equal(again, audio[2])
    for a in range(4):
        for b in range(a + 1, 4):
            same = audio[a].shape == audio[b].shape and np.allclose(audio[a], audio[b])
            assert not same, (a, b)


def test_the_config_names_speakers_and_a_default(voices: dict[str, Voice]) -> None:
    info = voices[MULTI].info
    assert info.describe()["speakers"] == ["alice", "bob", "carol", "dave"]
    assert info.speaker_id("carol") == 2 and info.speaker_id(None) == info.default_speaker == 0
    assert info.quality == "x_low"
    assert voices[GERMAN].info.espeak_voice == "de"


def test_constants_folded_into_initializers_give_the_same_output() -> None:
    nodes = [
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.float32(3.0))),
        helper.make_node("Constant", [], ["shape"], value_ints=[1, -1]),
        helper.make_node("Mul", ["x", "k"], ["y0"]),
        helper.make_node("Reshape", ["y0", "shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "c",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    folded, count = fold_constants(model)
    assert count == 2
    assert [n.op_type for n in folded.graph.node] == ["Mul", "Reshape"]
    assert len(model.graph.node) == 4  # the original is left as it was
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def run(m: onnx.ModelProto) -> np.ndarray:
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        out: np.ndarray = s.run(None, {"x": x})[0]
        return out

    assert np.array_equal(run(model), run(folded))


def test_another_speaker_streams_the_same_samples_as_its_whole_sentence(
    voices: dict[str, Voice],
) -> None:
    """The check at cut time runs the default speaker; the flow's and decoder's speaker
    conditioning must carry any other one through the windows too."""
    from appliance.model.engine.windows import decode_windows

    v = voices[MULTI]
    model = _model(v)
    ids = Phonemizer(v.info).ids("Testing one two three, the quick brown fox.")
    quiet = Scales(0.0, 1.0, 0.0)
    for sid in (1, 3):
        fused = model.fused(ids, quiet, sid)
        for window in (8, 32):
            encoded = model.encode_prior(ids, quiet, sid)
            windowed = decode_windows(model, encoded, window, v.context_frames, v.info.hop_length)
            assert windowed.shape == fused.shape
            assert float(np.max(np.abs(windowed - fused))) <= CUT_TOLERANCE, (sid, window)
