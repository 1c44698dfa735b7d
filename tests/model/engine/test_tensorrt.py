"""TensorRT backend and GPU selection, driven through fake TensorRT/CUDA/NVML.

The CPU side is the real bundled voice on ONNX Runtime; the fake TensorRT runs
the same ONNX halves, so GPU and CPU outputs can be compared sample by sample.
"""

from __future__ import annotations

import functools
import itertools
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.model.engine.base import BackendError, Window
from appliance.model.engine.engine_cache import EngineCache
from appliance.model.engine.gpu_select import gpu_health, load_gpu_pool, prepare_engines
from appliance.model.engine.pool import FailoverVoiceModel, UnsupportedInput
from appliance.model.engine.tensorrt import (
    GATE_SCALES,
    GATE_SENTENCES,
    ModelLimits,
    TensorRTVoiceModel,
    build_engine,
)
from appliance.model.engine.trt_seam import TrtRuntime
from appliance.ops.config import Config, parse_config
from appliance.ops.meter import PartCost
from appliance.speech import FloatArray
from tests.fakes.cudart import FakeCudart, cudaError_t
from tests.fakes.gpu_env import GpuEnv, gpu_env, stream_windows
from tests.fakes.tensorrt import FakeTensorRT
from tests.fakes.voice import real_voice

IDS = np.asarray(GATE_SENTENCES[0], dtype=np.int64)


@pytest.fixture(autouse=True)
def short_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """One gate sentence instead of three: the same check, a third of the CPU time."""
    monkeypatch.setattr("appliance.model.engine.tensorrt.GATE_SENTENCES", GATE_SENTENCES[2:])


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def trt_model(model: object) -> TensorRTVoiceModel:
    assert isinstance(model, FailoverVoiceModel)
    primary = model._primary
    assert isinstance(primary, TensorRTVoiceModel)
    return primary


def close(model: object) -> None:
    if isinstance(model, FailoverVoiceModel) and model._watchdog is not None:
        model._watchdog.stop()


def test_first_start_builds_then_the_cache_hits(tmp_path: Path) -> None:
    voice, cpu = real_voice()
    env = gpu_env(tmp_path)
    model, status = env.load(voice, cpu)
    close(model)
    assert status["backend"] == "tensorrt" and status["status"] == "ok"
    assert status["engines"]["engines"] == {"encoder": "built", "decoder": "built"}
    assert status["engines"]["snr_db"] >= 25
    assert len(env.trt.builds) == 2
    assert sorted(p.suffix for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        ".json",
        ".json",
        ".plan",
        ".plan",
    ]
    again = gpu_env(tmp_path)
    model, status = again.load(voice, cpu)
    close(model)
    assert status["engines"]["engines"] == {"encoder": "cached", "decoder": "cached"}
    assert again.trt.builds == []
    assert "engines_rebuilt" not in status


def test_tensorrt_upgrade_rebuilds_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    voice, cpu = real_voice()
    close(gpu_env(tmp_path, version="10.3.0").load(voice, cpu)[0])
    caplog.clear()
    upgraded = gpu_env(tmp_path, version="10.4.1")
    model, status = upgraded.load(voice, cpu)
    close(model)
    assert len(upgraded.trt.builds) == 2
    assert any("tensorrt: cached '10.3.0', running '10.4.1'" in w for w in warnings_in(caplog))
    assert any("mismatch" in r for r in status["engines_rebuilt"])
    assert status["backend"] == "tensorrt"


@pytest.mark.parametrize("how", ["garbage", "garbage-with-matching-sidecar"])
def test_corrupt_engine_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    voice, cpu = real_voice()
    env = gpu_env(tmp_path)
    close(env.load(voice, cpu)[0])
    plan = next(tmp_path.glob("*.encoder.fp16.*.plan"))
    plan.write_bytes(b"\0" * 64)
    if how == "garbage-with-matching-sidecar":
        # Only TensorRT itself can tell this plan is bad.
        import hashlib
        import json

        sidecar = plan.with_suffix(".json")
        meta = json.loads(sidecar.read_text())
        meta["plan_sha256"] = hashlib.sha256(b"\0" * 64).hexdigest()
        sidecar.write_text(json.dumps(meta))
    caplog.clear()
    again = gpu_env(tmp_path)
    model, status = again.load(voice, cpu)
    close(model)
    assert again.trt.builds, "the corrupt engine was not rebuilt"
    assert any("rebuilding" in w for w in warnings_in(caplog))
    assert any("corrupt" in r for r in status["engines_rebuilt"])
    assert status["backend"] == "tensorrt"


def test_accuracy_gate_falls_back_to_fp32(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    voice, cpu = real_voice()
    env = gpu_env(tmp_path)
    env.trt.fp16_snr_db = 12.0
    model, status = env.load(voice, cpu)
    close(model)
    assert status["engines"]["precision"] == "fp32"
    assert any("FP16 engines rejected" in w for w in warnings_in(caplog))
    assert len(env.trt.builds) == 4
    # The verdict is remembered: the next start goes straight to the FP32 engines.
    again = gpu_env(tmp_path)
    model, status = again.load(voice, cpu)
    close(model)
    assert again.trt.builds == [] and status["engines"]["precision"] == "fp32"


def test_accuracy_gate_refuses_tensorrt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    voice, cpu = real_voice()
    env = gpu_env(tmp_path)
    env.trt.fp16_snr_db = env.trt.fp32_snr_db = 12.0
    model, status = env.load(voice, cpu)
    assert status["status"] == "degraded"
    assert "refusing TensorRT" in status["reason"] and "fp32" in status["reason"]
    assert model.state()["backend"] == "onnx-cpu"  # type: ignore[attr-defined]
    window = Window(cpu.encode(IDS, GATE_SCALES, None).z[:, :, :48], None)
    assert model.decode(window).shape == (48 * 256,)
    assert any("GPU backend unavailable" in w for w in warnings_in(caplog))


def test_windows_match_the_cpu(tmp_path: Path) -> None:
    voice, cpu = real_voice()
    env = gpu_env(tmp_path, precision="fp32")
    model, _ = env.load(voice, cpu)
    close(model)
    gpu = trt_model(model)
    enc_cpu = cpu.encode(IDS, GATE_SCALES, None)
    enc_gpu = gpu.encode(IDS, GATE_SCALES, None)
    np.testing.assert_array_equal(enc_gpu.durations, enc_cpu.durations)
    np.testing.assert_allclose(enc_gpu.z, enc_cpu.z, atol=1e-5)
    z = enc_cpu.z
    # A window shorter than the engine's minimum is zero-padded and trimmed.
    short = z[:, :, :10]
    padded = np.zeros((1, z.shape[1], 16), dtype=np.float32)
    padded[:, :, :10] = short
    np.testing.assert_allclose(
        gpu.decode(Window(short, None)), cpu.decode(Window(padded, None))[: 10 * 256], atol=1e-6
    )
    # Longer than the engine's maximum (128 frames): pieces with 16 frames of context.
    assert z.shape[2] > 128
    np.testing.assert_allclose(gpu.decode(Window(z, None)), cpu.decode(Window(z, None)), atol=1e-4)
    with pytest.raises(UnsupportedInput):
        gpu.encode(np.ones(Config().engine.max_phonemes + 1, dtype=np.int64), GATE_SCALES, None)


def test_the_gpus_runs_are_counted_beside_the_cpus(tmp_path: Path) -> None:
    """``stats.model_runs`` on a GPU box: the engines' runs by part in the CPU model's
    meter (the runtime's one), the decoder's kept frames only."""
    voice, cpu = real_voice()
    model, _ = gpu_env(tmp_path, precision="fp32").load(voice, cpu)
    close(model)
    gpu = trt_model(model)
    assert gpu.meter is cpu.meter
    before = cpu.meter.snapshot()
    enc = gpu.encode(IDS, GATE_SCALES, None)
    gpu.decode(Window(enc.z[:, :, :40], None, (4, 6)))
    gpu.decode(Window(enc.z[:, :, :20], None))
    runs = cpu.meter.snapshot()
    encoder, decoder = (before.get(part, PartCost()) for part in ("gpu_encoder", "gpu_decoder"))
    assert runs["gpu_encoder"].runs - encoder.runs == 1
    assert runs["gpu_decoder"].runs - decoder.runs == 2
    assert runs["gpu_decoder"].frames - decoder.frames == 30 + 20
    assert runs["gpu_encoder"].frames - encoder.frames == enc.z.shape[2]
    assert runs["gpu_decoder"].wall_s > 0


def test_onnx_cpu_returns_the_cpu_model() -> None:
    _, cpu = real_voice()
    cfg = parse_config({"engine": {"backend": "onnx-cpu"}})

    def boom() -> None:
        raise AssertionError("onnx-cpu must not probe the GPU")

    model, status = load_gpu_pool(real_voice()[0], cpu, cfg, nvml_loader=boom, trt_loader=boom)
    assert model is cpu and status["backend"] == "onnx-cpu"


def test_cpu_only_box_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    voice, cpu = real_voice()
    model, status = load_gpu_pool(
        voice, cpu, parse_config({}), nvml_loader=lambda: None, trt_loader=lambda: None
    )
    infos = [r.getMessage() for r in caplog.records if r.name.startswith("appliance")]
    assert [m for m in infos if "watchdog" in m] == [
        "GPU watchdog disabled: NVML not available (no NVIDIA driver)"
    ]
    assert any("backend: onnx-cpu" in m for m in infos)
    assert warnings_in(caplog) == []
    assert status["status"] == "ok"
    health = gpu_health(model, status)
    assert (health["backend"], health["gpu"], health["status"]) == ("onnx-cpu", "absent", "ok")
    window = Window(cpu.encode(IDS, GATE_SCALES, None).z[:, :, :48], None)
    assert model.decode(window).shape == (48 * 256,)


def test_tensorrt_requested_without_gpu_is_degraded(caplog: pytest.LogCaptureFixture) -> None:
    voice, cpu = real_voice()
    cfg = parse_config({"engine": {"backend": "tensorrt"}})
    _, status = load_gpu_pool(voice, cpu, cfg, nvml_loader=lambda: None, trt_loader=lambda: None)
    assert status["status"] == "degraded" and status["reason"] == "no GPU"
    assert warnings_in(caplog)


def test_gpu_without_tensorrt_is_degraded(tmp_path: Path) -> None:
    voice, cpu = real_voice()
    env = gpu_env(tmp_path)
    _, status = load_gpu_pool(
        voice, cpu, env.cfg, nvml_loader=lambda: env.nvml, trt_loader=lambda: None
    )
    assert status["status"] == "degraded" and "TensorRT" in status["reason"]


def test_prepare_engines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    voice, cpu = real_voice()
    env: GpuEnv = gpu_env(tmp_path)
    prepare_engines(voice, env.cfg, lambda m: None, trt_loader=lambda: None)
    assert any("TensorRT not installed" in r.getMessage() for r in caplog.records)
    assert not any(tmp_path.iterdir())
    progress: list[str] = []
    prepare_engines(voice, env.cfg, progress.append, trt_loader=lambda: env.rt, cpu_model=cpu)
    assert any("building TensorRT encoder" in m for m in progress)
    assert any("accuracy gate" in m for m in progress)
    assert (tmp_path / ".build.lock").exists()
    assert EngineCache(tmp_path).directory == tmp_path
    assert len(env.trt.builds) == 2
    prepare_engines(voice, env.cfg, progress.append, trt_loader=lambda: env.rt, cpu_model=cpu)
    assert len(env.trt.builds) == 2


# --------------------------------------------------------------------------- CUDA graphs


@pytest.fixture(scope="module")
def plans() -> tuple[bytes, bytes]:
    """FP32 encoder and decoder plans of the real voice, built once (no gate: not under test)."""
    voice, _ = real_voice()
    rt = gpu_env(Path("/nonexistent")).rt
    assert voice.encoder_path is not None and voice.decoder_path is not None
    limits = LIMITS
    enc = build_engine(
        rt, voice.encoder_path, precision="fp32", dim_range=(1, 64, limits.max_phonemes)
    )
    dec = build_engine(rt, voice.decoder_path, precision="fp32", dim_range=limits.decoder_frames)
    return enc, dec


LIMITS = ModelLimits(max_phonemes=400, decoder_frames=(16, 48, 128))


def fresh_gpu(plans: tuple[bytes, bytes]) -> tuple[TensorRTVoiceModel, FakeCudart]:
    """A TensorRT model on its own fake GPU, so each test sees only its own allocations."""
    cuda = FakeCudart()
    rt = TrtRuntime(trt=FakeTensorRT(cuda), cudart=cuda)
    return TensorRTVoiceModel.load(rt, *plans, device_index=0, limits=LIMITS), cuda


@functools.lru_cache(maxsize=1)
def latent() -> FloatArray:
    _, cpu = real_voice()
    z: FloatArray = cpu.encode(IDS, GATE_SCALES, None).z
    assert z.shape[2] >= 200
    return z


def plain(gpu: TensorRTVoiceModel, window: FloatArray) -> FloatArray:
    """The same window through the plain enqueue path (no graph)."""
    out = gpu._decoder.run({gpu._decoder.inputs[0]: window})
    samples: FloatArray = out[gpu._decoder.outputs[0]].reshape(-1)
    return samples


def test_graph_replays_match_the_plain_path_and_the_cpu(plans: tuple[bytes, bytes]) -> None:
    _, cpu = real_voice()
    gpu, cuda = fresh_gpu(plans)
    z = latent()
    # Two window sizes, interleaved: 5 windows of each at different places in z.
    windows = [z[:, :, s : s + n] for s in (0, 30, 60, 90, 120) for n in (64, 48)]
    outputs = []
    for window in windows:
        got = gpu.decode(Window(window, None))
        np.testing.assert_array_equal(got, plain(gpu, window))  # sample for sample
        np.testing.assert_allclose(got, cpu.decode(Window(window, None)), atol=1e-5)
        outputs.append(got)
    # First use plain, second captured (its warm-up answers it), then three replays each.
    stats = gpu.graph_stats()
    assert stats == {
        "graphs": 2,
        "graph_replays": 6,
        "plain_runs": 4,
        "captures": 2,
        "capture_failures": 0,
        "evictions": 0,
    }
    assert cuda.graph_launches == 6 and len(cuda.graph_execs) == 2
    # Replays read fresh input: same shape, different windows, different (correct) audio.
    replayed_64 = outputs[4::2]
    assert all(not np.array_equal(a, b) for a, b in itertools.pairwise(replayed_64))
    gpu.close()


def test_data_dependent_output_gets_no_graph(
    plans: tuple[bytes, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="appliance.model.engine.tensorrt")
    gpu, cuda = fresh_gpu(plans)
    encoder = gpu._encoder
    n = IDS.shape[0]
    feeds: dict[str, np.ndarray[Any, Any]] = {
        "input": IDS.reshape(1, n),
        "input_lengths": np.array([n], dtype=np.int64),
        "scales": GATE_SCALES.as_array(),
    }
    feeds = {k: v for k, v in feeds.items() if k in encoder.inputs}
    want = encoder.run(feeds)
    for _ in range(3):
        got = encoder.run_graph(feeds)
        for name in encoder.outputs:
            np.testing.assert_array_equal(got[name], want[name])
    assert encoder.graphs == 0
    assert encoder.stats["capture_failures"] == 1 and encoder.stats["plain_runs"] == 3
    notes = [r.getMessage() for r in caplog.records if "no CUDA graph" in r.getMessage()]
    assert len(notes) == 1 and "data-dependent" in notes[0]  # tried once, then remembered
    assert not cuda.host_allocs and not cuda.graphs and not cuda.graph_execs
    gpu.close()


def test_capture_error_falls_back_to_the_plain_path(plans: tuple[bytes, bytes]) -> None:
    _, cpu = real_voice()
    gpu, cuda = fresh_gpu(plans)
    z = latent()
    cuda.capture_error = cudaError_t.cudaErrorStreamCaptureUnsupported
    for start in (0, 40, 80):
        window = z[:, :, start : start + 64]
        np.testing.assert_allclose(
            gpu.decode(Window(window, None)), cpu.decode(Window(window, None)), atol=1e-5
        )
    stats = gpu.graph_stats()
    assert stats["capture_failures"] == 1 and stats["graph_replays"] == 0
    assert stats["graphs"] == 0 and stats["plain_runs"] == 3
    assert not cuda.host_allocs and not cuda.graphs and not cuda.graph_execs
    # The failure was that shape's; another shape still gets its graph.
    for start in (0, 40, 80):
        window = z[:, :, start : start + 40]
        np.testing.assert_allclose(
            gpu.decode(Window(window, None)), cpu.decode(Window(window, None)), atol=1e-5
        )
    assert gpu.graph_stats()["graph_replays"] == 1
    gpu.close()


def test_gpu_lost_during_a_replay_fails_over_to_the_cpu(plans: tuple[bytes, bytes]) -> None:
    _, cpu = real_voice()
    gpu, cuda = fresh_gpu(plans)
    window = latent()[:, :, :64]
    for _ in range(3):
        gpu.decode(Window(window, None))
    assert gpu.graph_stats()["graph_replays"] == 1
    cuda.lost = True
    with pytest.raises(BackendError) as err:
        gpu.decode(Window(window, None))
    assert not isinstance(err.value, UnsupportedInput)  # a GPU fault, not an input the GPU refuses
    assert "cudaGraphLaunch" in str(err.value)
    gpu.close()

    # Through the pool: windows 3 and 4 (64 frames) are replays; the GPU dies before 4.
    gpu, cuda = fresh_gpu(plans)
    pool = FailoverVoiceModel(gpu, cpu)
    z = latent()

    def before(i: int) -> None:
        if i == 4:
            assert gpu.graph_stats()["graph_replays"] == 1
            cuda.lost = True

    audio = stream_windows(pool, z, before=before)
    np.testing.assert_allclose(audio, stream_windows(cpu, z), atol=1e-4)
    state = pool.state()
    assert state["gpu"] == "down" and state["failovers"] == 1 and state["rerun_windows"] == 1
    pool.close()


def test_close_destroys_graphs_and_frees_their_buffers(plans: tuple[bytes, bytes]) -> None:
    gpu, cuda = fresh_gpu(plans)
    z = latent()
    for n in (64, 48, 64, 48):
        gpu.decode(Window(z[:, :, :n], None))
    assert gpu.graph_stats()["graphs"] == 2
    assert len(cuda.graph_execs) == 2 and not cuda.graphs  # templates go after instantiation
    assert cuda.host_allocs and cuda.allocs
    gpu.close()
    assert not cuda.graph_execs and not cuda.host_allocs and not cuda.allocs


def test_graph_cache_is_bounded(
    plans: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("appliance.model.engine.tensorrt.MAX_GRAPHS", 2)
    _, cpu = real_voice()
    gpu, cuda = fresh_gpu(plans)
    z = latent()
    for n in (40, 40, 48, 48, 64, 64):  # the third captured shape evicts the first
        gpu.decode(Window(z[:, :, :n], None))
    stats = gpu.graph_stats()
    assert stats["graphs"] == 2 and stats["evictions"] == 1 and stats["captures"] == 3
    assert len(cuda.graph_execs) == 2
    window = z[:, :, 10:58]
    np.testing.assert_allclose(
        gpu.decode(Window(window, None)), cpu.decode(Window(window, None)), atol=1e-5
    )
    assert gpu.graph_stats()["graph_replays"] == 1
    gpu.close()


def test_fake_capture_keeps_cuda_and_tensorrt_rules(plans: tuple[bytes, bytes]) -> None:
    """The fakes refuse what the real runtime refuses, so the backend cannot rely on leniency."""
    gpu, cuda = fresh_gpu(plans)
    _, stream = cuda.cudaStreamCreate()
    assert cuda.cudaStreamEndCapture(stream)[0] == cudaError_t.cudaErrorIllegalState
    ctx = gpu._decoder.engine.create_execution_context()
    assert ctx.set_input_shape(gpu._decoder.inputs[0], (1, 192, 32))
    mode = cuda.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
    assert cuda.cudaStreamBeginCapture(stream, mode) == (cudaError_t.cudaSuccess,)
    assert cuda.cudaStreamBeginCapture(stream, mode)[0] == cudaError_t.cudaErrorIllegalState
    # No enqueue since the shape changed: TensorRT cannot capture, and the capture is void.
    assert not ctx.execute_async_v3(int(stream))
    assert cuda.cudaStreamEndCapture(stream) == (
        cudaError_t.cudaErrorStreamCaptureInvalidated,
        None,
    )
    # Allocating while capturing breaks the capture too.
    cuda.cudaStreamBeginCapture(stream, mode)
    assert cuda.cudaMalloc(16)[0] == cudaError_t.cudaErrorStreamCaptureUnsupported
    assert cuda.cudaStreamEndCapture(stream)[0] == cudaError_t.cudaErrorStreamCaptureInvalidated
    gpu.close()
