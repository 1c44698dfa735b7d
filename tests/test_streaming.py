"""Windowed streaming equals the fused model; the chunk plan keeps its promises."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from appliance.config import Config
from appliance.engine.base import Scales
from appliance.engine.onnx import OnnxVoiceModel
from appliance.engine.windows import ensure_latent
from appliance.frontend import FrontendLimits, prepare
from appliance.phonemize import Phonemizer
from appliance.streaming import ModePlan, fade, mode_plan, plan_chunks
from appliance.voices import Voice, bundled_voice_path, load_voice
from tests.conftest import Daemon
from tests.wire import Wire

SHORT = "Turn on the kitchen lights."
LONG = (
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building which would replace the old structure that had stood in the town "
    "square for more than one hundred years and had become too small for the growing "
    "number of students and families who depended on it every single day of the week"
)
MULTI = "Good morning! The time is seven thirty. You have three new messages; one is urgent."


@pytest.fixture(scope="module")
def reference(voice_cache: Path) -> tuple[OnnxVoiceModel, Phonemizer, int]:
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.split_ok, voice.split_note
    model = OnnxVoiceModel.load(
        voice.model_path, voice.encoder_path, voice.decoder_path, voice.cut, 2
    )
    return model, Phonemizer(voice.info), voice.info.sample_rate


def _fused_reference(ref: tuple[OnnxVoiceModel, Phonemizer, int], text: str) -> np.ndarray:
    model, ph, rate = ref
    cfg = Config()
    limits = FrontendLimits(
        cfg.server.max_text_chars, cfg.streaming.clause_chars, cfg.streaming.first_clause_chars
    )
    clauses = prepare(text, "en_US", limits)
    n_fade = round(rate * cfg.streaming.join_fade_ms / 1000)
    parts = []
    for k, clause in enumerate(clauses):
        audio = model.fused(ph.ids(clause.text), Scales(0.0, 1.0, 0.0), None)
        audio = fade(audio, n_fade if k > 0 else 0, n_fade if k + 1 < len(clauses) else 0)
        parts.append(audio)
    return np.clip(np.concatenate(parts), -1, 1)


@pytest.mark.parametrize("mode", ["dialog", "reading", "sentence"])
@pytest.mark.parametrize("text", [SHORT, LONG, MULTI], ids=["short", "long", "multi"])
def test_windowed_equals_fused(daemon: Daemon, reference, text: str, mode: str) -> None:
    with Wire(daemon.socket) as w:
        w.send(
            {
                "op": "synthesize",
                "id": 1,
                "text": text,
                "format": "f32le",
                "noise_scale": 0.0,
                "noise_w": 0.0,
                "mode": mode,
            }
        )
        evs = w.until(1)
    assert evs[-1]["event"] == "end", evs[-1]
    chunks = [e for e in evs if e["event"] == "chunk"]
    got = np.concatenate([np.frombuffer(c["audio"], dtype="<f4") for c in chunks])
    want = _fused_reference(reference, text)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4
    # Chunks are numbered, contiguous in time, and their spans lie in the text.
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    offset = 0.0
    for c in chunks:
        assert c["offset_ms"] == pytest.approx(offset, abs=0.01)
        offset += c["duration_ms"]
        a, b = c["text_span"]
        assert 0 <= a < b <= len(text)
    assert chunks[-1]["sentence_end"]
    if mode == "dialog" and text is not SHORT:
        assert len(chunks) > 2
        assert 80 <= chunks[0]["duration_ms"] <= 200


def test_first_chunk_of_long_text_comes_from_first_clause(daemon: Daemon) -> None:
    text = LONG + ". " + LONG
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 2, "text": text})
        evs = w.until(2)
    first = next(e for e in evs if e["event"] == "chunk")
    assert first["text_span"][1] <= 100  # the first clause is short: TTFP does not grow with text
    assert evs[-1]["stats"]["chunks"] == sum(1 for e in evs if e["event"] == "chunk")


def test_output_formats_rates_and_volume(daemon: Daemon) -> None:
    def audio(**opts) -> tuple[np.ndarray, int]:
        with Wire(daemon.socket) as w:
            w.send(
                {"op": "synthesize", "id": 3, "text": SHORT, "noise_scale": 0, "noise_w": 0, **opts}
            )
            evs = w.until(3)
        start = evs[0]
        data = b"".join(e["audio"] for e in evs if e["event"] == "chunk")
        if start["format"] == "f32le":
            return np.frombuffer(data, dtype="<f4"), start["sample_rate"]
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767, start["sample_rate"]

    base, rate = audio(format="f32le")
    s16, _ = audio()
    assert rate == 22050
    assert np.max(np.abs(s16 - np.clip(base, -1, 1))) < 2e-4
    half, _ = audio(format="f32le", volume=0.5)
    assert np.allclose(half, np.clip(base * 0.5, -1, 1), atol=1e-5)
    up, rate2 = audio(format="f32le", sample_rate=16000)
    assert rate2 == 16000
    assert abs(len(up) - len(base) * 16000 / 22050) < 64
    slow, _ = audio(format="f32le", speed=0.5)
    assert len(slow) > 1.6 * len(base)


def test_plan_chunks_respects_bounds_and_boundaries() -> None:
    rng = np.random.default_rng(1)
    durations = rng.integers(0, 8, size=300).astype(np.float32)
    boundary = [bool(x) for x in rng.random(300) < 0.2]
    plan = mode_plan("dialog", 1000 * 256 / 22050)
    chunks, _ = plan_chunks(durations, boundary, plan, plan.first_target, first=True)
    total = int(durations.sum())
    assert chunks[0][0] == 0 and chunks[-1][1] == total
    assert all(a < b for a, b in chunks)
    assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))
    assert plan.first_min <= chunks[0][1] <= plan.first_max
    sizes = [b - a for a, b in chunks[:-1]]
    assert max(sizes) <= plan.cap * 1.5
    # Growth: later chunks are not smaller than the first.
    assert all(s >= chunks[0][1] // 2 for s in sizes)


def test_sentence_mode_is_one_chunk_per_clause() -> None:
    plan = ModePlan(1, 1, 1, 1, whole=True)
    chunks, _ = plan_chunks(np.ones(50, dtype=np.float32), [False] * 50, plan, 1, True)
    assert chunks == [(0, 50)]


@pytest.fixture(scope="module")
def flow_split(voice_cache: Path) -> tuple[Voice, OnnxVoiceModel]:
    """The bundled voice and its CPU model with the flow as a separate part."""
    voice = load_voice("en_US-joe-medium", bundled_voice_path(), voice_cache)
    assert voice.flow_split is not None and voice.cut is not None
    model = OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.decoder_path,
        voice.cut,
        1,
        flow=voice.flow_split,
    )
    return voice, model


def test_flow_in_two_steps_equals_the_whole_encoder(
    flow_split: tuple[Voice, OnnxVoiceModel],
) -> None:
    voice, split = flow_split
    whole = OnnxVoiceModel.load(
        voice.model_path, voice.encoder_path, voice.decoder_path, voice.cut, 1
    )
    ids = Phonemizer(voice.info).ids(LONG[:120])
    scales = Scales(0.0, 1.0, 0.0)
    reference = whole.encode(ids, scales, None)
    enc = split.encode_prior(ids, scales, None)
    assert enc.ready == 0 and enc.z_p is not None and enc.frames == reference.frames
    ensure_latent(split, enc, 20)
    assert enc.ready == 20  # the first call: only what the first window needs
    np.testing.assert_allclose(enc.z[:, :, :20], reference.z[:, :, :20], atol=1e-4)
    ensure_latent(split, enc, 10)
    assert enc.ready == 20  # already there: nothing runs
    ensure_latent(split, enc, 21)
    assert enc.ready == enc.frames and enc.z_p is None  # the second call: all the rest
    np.testing.assert_allclose(enc.durations, reference.durations)
    # encode() on the split model is prior + whole flow: the same z, complete, and the
    # flow in two steps gives it too (the same graphs: only float rounding apart).
    full = split.encode(ids, scales, None)
    assert full.ready == full.frames and full.z_p is None
    np.testing.assert_allclose(enc.z, full.z, atol=1e-5)
    # The whole encoder is another graph (its convolutions stay 1-D, see
    # appliance.voices._optimised): latents reach ±20, so its rounding shows at 1e-4.
    np.testing.assert_allclose(full.z, reference.z, rtol=1e-4, atol=1e-4)


def test_flow_context_makes_windows_exact_and_less_does_not(
    flow_split: tuple[Voice, OnnxVoiceModel],
) -> None:
    voice, model = flow_split
    assert voice.cut is not None and voice.cut.flow_context == 32
    ids = Phonemizer(voice.info).ids(LONG[:120])
    enc = model.encode_prior(ids, Scales(0.0, 1.0, 0.0), None)
    assert enc.z_p is not None
    full = model.flow(enc.z_p, None)
    a, b = 40, 60

    def window(context: int) -> float:
        assert enc.z_p is not None
        z = model.flow(enc.z_p[:, :, a - context : b + context], None)
        return float(np.abs(z[:, :, context : context + b - a] - full[:, :, a:b]).max())

    assert window(32) <= 1e-4
    assert window(8) > 1e-3  # the context is needed: the check can tell
