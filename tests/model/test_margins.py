"""A decoder that crops its windows' margins gives the samples the whole window gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from appliance.model.engine.base import Window
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.margins import METADATA_KEY, MarginCrops, add_margin_crops, read_crops
from appliance.model.voices import Voice, bundled_voice_path, cut_lean_decoder, load_voice
from tests.fakes.graphs import toy_decoder


def test_each_crop_keeps_what_the_layers_after_it_reach() -> None:
    crops = MarginCrops(((8, 2), (64, 1)))
    # 18 frames, 8 wanted + 10 of right context: 8 of them go at the first crop (x8), 1 more
    # at the second (x64); the output still holds 1 frame of context, trimmed by the caller.
    feeds, left, right = crops.feeds(18, 0, 10)
    assert {k: int(v[0]) for k, v in feeds.items()} == {
        "margin_crop0_start": 0,
        "margin_crop0_end": 10 * 8,
        "margin_crop1_start": 0,
        "margin_crop1_end": 9 * 64,
    }
    assert (left, right) == (0, 1)
    # Both sides, and a margin narrower than what a crop keeps (nothing dropped there).
    feeds, left, right = crops.feeds(30, 10, 1)
    assert {k: int(v[0]) for k, v in feeds.items()} == {
        "margin_crop0_start": 8 * 8,
        "margin_crop0_end": 30 * 8,  # the right margin is within what it keeps
        "margin_crop1_start": 1 * 64,
        "margin_crop1_end": 22 * 64,  # 30 - 8 frames are left
    }
    assert (left, right) == (1, 1)


def test_the_crops_are_read_back_from_the_metadata() -> None:
    crops = MarginCrops(((8, 1), (64, 1), (256, 1)))
    assert read_crops({METADATA_KEY: crops.to_metadata()}) == crops
    assert read_crops({}) is None
    for bad in ("", "8", "8:-1", "0:1", "x:1"):
        with pytest.raises(ValueError):
            MarginCrops.from_metadata(bad)


def test_a_graph_that_is_not_an_upsampling_decoder_is_refused(voice_cache: Path) -> None:
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.flow_split is not None
    with pytest.raises(ValueError, match="upsamples"):
        add_margin_crops(onnx.load(str(voice.flow_split.flow_path)), 1)
    # The toy's last convolution reads a graph input (the speaker), not the upsampled audio.
    with pytest.raises(ValueError, match="not computed by the graph"):
        add_margin_crops(toy_decoder(), 1)


@pytest.fixture(scope="module")
def voice(voice_cache: Path) -> Voice:
    return load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)


def test_the_bundled_flow_crops_after_each_coupling_layer(voice: Voice) -> None:
    assert voice.flow_split is not None
    model = onnx.load(str(voice.flow_split.flow_path))
    meta = {p.key: p.value for p in model.metadata_props}
    # Four coupling layers of 8 frames' reach each: after the first three, what the rest
    # reaches (the last one's is trimmed by the caller); the mask is cropped alike.
    assert meta[METADATA_KEY] == "1:24,1:16,1:8"
    crops = [n for n in model.graph.node if "__margins" in n.output[0]]
    assert len(crops) == 6  # three of the latent, three of the mask (each of the last)
    assert voice.cut is not None
    assert [n.input[0] for n in crops if n.input[0] == voice.cut.mask] == [voice.cut.mask]


def test_the_bundled_voice_crops_before_each_stage_after_the_first(voice: Voice) -> None:
    assert voice.margin_decoder_path is not None and voice.lean_decoder_path is not None
    for path in (voice.margin_decoder_path, voice.lean_decoder_path):
        model = onnx.load(str(path))
        meta = {p.key: p.value for p in model.metadata_props}
        # Three upsampling stages (x8, x8, x4): crops at x8 and x64 (before the second and
        # third) and at x256 (before the last convolution); the check passed keeping 1.
        assert meta[METADATA_KEY] == "8:1,64:1,256:1"
        assert sum(n.op_type == "Slice" for n in model.graph.node) == 3


Pairs = list[tuple[OnnxVoiceModel, OnnxVoiceModel]]


@pytest.fixture(scope="module")
def cropped_and_whole(voice: Voice, tmp_path_factory: pytest.TempPathFactory) -> Pairs:
    """The 1-D decoder (first chunks) and the 2-D one (windows ahead), each beside the same
    graph without crops: written and loaded once for every margin below (it took 5-7 s for
    each of them)."""
    assert voice.cut is not None and voice.margin_decoder_path is not None
    assert voice.decoder_path is not None
    whole_lean = cut_lean_decoder(voice.decoder_path, tmp_path_factory.mktemp("lean"))

    def model(dec: Path | None, lean: Path | None) -> OnnxVoiceModel:
        return OnnxVoiceModel.load(
            voice.model_path, voice.encoder_path, dec, voice.cut, 1, lean_decoder=lean
        )

    return [
        (model(voice.margin_decoder_path, None), model(voice.decoder_path, None)),
        (model(voice.decoder_path, voice.lean_decoder_path), model(voice.decoder_path, whole_lean)),
    ]


@pytest.mark.parametrize("margins", [(0, 10), (10, 10), (10, 3), (0, 0), (4, 0)])
def test_a_cropped_window_gives_the_samples_of_the_whole_one(
    cropped_and_whole: Pairs, margins: tuple[int, int]
) -> None:
    """The 1-D decoder (first chunks) and the 2-D one (windows ahead), each against the
    same graph without crops decoding the whole window and trimming it."""
    pairs = cropped_and_whole
    rng = np.random.default_rng(11)
    z = rng.standard_normal((1, 192, 26)).astype(np.float32)
    for cropped, whole in pairs:
        want = whole.decode(Window(z, None, margins))
        got = cropped.decode(Window(z, None, margins))
        assert got.shape == want.shape == ((26 - sum(margins)) * 256,)
        assert float(np.max(np.abs(got - want))) < 1e-5
    with pytest.raises(ValueError):
        Window(z, None, (13, 13))
