"""TensorRT backend and GPU selection, driven through fake TensorRT/CUDA/NVML.

The CPU side is the real bundled voice on ONNX Runtime; the fake TensorRT runs
the same ONNX halves, so GPU and CPU outputs can be compared sample by sample.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from appliance.config import parse_config
from appliance.engine.engine_cache import EngineCache
from appliance.engine.gpu_select import gpu_health, load_gpu_pool, prepare_engines
from appliance.engine.pool import FailoverVoiceModel, UnsupportedInput
from appliance.engine.tensorrt import GATE_SCALES, GATE_SENTENCES, TensorRTVoiceModel
from tests.fakes.gpu_env import GpuEnv, gpu_env
from tests.fakes.voice import real_voice

IDS = np.asarray(GATE_SENTENCES[0], dtype=np.int64)


@pytest.fixture(autouse=True)
def short_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """One gate sentence instead of three: the same check, a third of the CPU time."""
    monkeypatch.setattr("appliance.engine.tensorrt.GATE_SENTENCES", GATE_SENTENCES[2:])


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
    assert model.decode(cpu.encode(IDS, GATE_SCALES, None).z[:, :, :48], None).shape == (48 * 256,)
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
        gpu.decode(short, None), cpu.decode(padded, None)[: 10 * 256], atol=1e-6
    )
    # Longer than the engine's maximum (128 frames): pieces with 16 frames of context.
    assert z.shape[2] > 128
    np.testing.assert_allclose(gpu.decode(z, None), cpu.decode(z, None), atol=1e-4)
    with pytest.raises(UnsupportedInput):
        gpu.encode(np.ones(401, dtype=np.int64), GATE_SCALES, None)


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
    assert model.decode(cpu.encode(IDS, GATE_SCALES, None).z[:, :, :48], None).shape == (48 * 256,)


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
