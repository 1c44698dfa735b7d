"""Hot failover: a GPU that degrades or dies mid-stream loses no request and no audio.

Streams decode windows of 32 frames with 16 frames of context each side (as
the streamer does) through the pool built by ``load_gpu_pool`` on fake
TensorRT/CUDA/NVML; the CPU side is the real voice.  The concatenated audio
must equal the CPU reference despite the failover.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.model.engine.base import Encoded, Scales, VoiceModel, Window
from appliance.model.engine.gpu_select import gpu_health
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.pool import FailoverVoiceModel, UnsupportedInput
from appliance.model.engine.tensorrt import GATE_SCALES, GATE_SENTENCES, TensorRTVoiceModel
from appliance.speech import FloatArray, IntArray
from tests.fakes.gpu_env import GpuEnv, gpu_env, stream_windows
from tests.fakes.voice import real_voice

IDS = np.asarray(GATE_SENTENCES[1], dtype=np.int64)


@pytest.fixture(autouse=True)
def short_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("appliance.model.engine.tensorrt.GATE_SENTENCES", GATE_SENTENCES[2:])


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[GpuEnv, FailoverVoiceModel, Encoded, FloatArray]:
    voice, cpu = real_voice()
    # FP32 so that the fake GPU computes exactly what the CPU does.
    env = gpu_env(tmp_path, precision="fp32", watchdog_interval_ms=10, recovery_healthy_s=0.3)
    model, status = env.load(voice, cpu)
    assert isinstance(model, FailoverVoiceModel) and status["watchdog"] == "running"
    enc = cpu.encode(IDS, GATE_SCALES, None)
    reference = stream_windows(cpu, enc.z)
    yield env, model, enc, reference
    if env.trt.hang is not None:
        env.trt.hang.set()
    model._watchdog.stop()  # type: ignore[union-attr]


def run_streams(model: VoiceModel, z: FloatArray, n: int, before: Any) -> list[FloatArray]:
    """``n`` concurrent requests; ``before(i)`` runs before window i of the first one."""
    out: list[FloatArray | None] = [None] * n

    def one(k: int) -> None:
        out[k] = stream_windows(model, z, before=before if k == 0 else None)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(o is not None for o in out), "a request did not complete"
    return [o for o in out if o is not None]


def test_link_downgrade_mid_stream(setup: Any) -> None:
    env, model, enc, reference = setup
    executes_before = env.trt.executes

    def before(i: int) -> None:
        if i == 3:
            # The next GPU call hangs on the device; the link then drops to x8.
            env.trt.in_execute.clear()
            env.trt.hang = threading.Event()

            def degrade() -> None:
                env.trt.in_execute.wait(10)
                env.nvml.width = 8

            threading.Thread(target=degrade, daemon=True).start()

    audios = run_streams(model, enc.z, 3, before)
    for audio in audios:
        assert np.abs(audio - reference).max() <= 1e-4
    state = model.state()
    assert env.trt.executes > executes_before  # the GPU did serve the start of the streams
    assert state["gpu"] == "down" and state["backend"] == "onnx-cpu"
    assert state["failovers"] == 1
    assert state["last_alarm"]["kind"] == "link_degraded"
    assert "x8" in state["last_alarm"]["reason"]
    # Every window that was on (or queued for) the stuck GPU was re-run on the CPU.
    assert 1 <= state["rerun_windows"] <= 3
    print(f"link downgrade: {state['rerun_windows']} window(s) re-run on the CPU")


def test_gpu_lost_inside_execute_then_recovery(setup: Any) -> None:
    env, model, enc, reference = setup

    def before(i: int) -> None:
        if i == 2:
            env.cuda.lost = True  # execute_async_v3 fails, every CUDA call errors
            env.nvml.lost = env.nvml.NVML_ERROR_GPU_IS_LOST

    (audio,) = run_streams(model, enc.z, 1, before)
    assert np.abs(audio - reference).max() <= 1e-4
    state = model.state()
    assert state["gpu"] == "down" and state["failovers"] == 1
    assert state["rerun_windows"] == 1
    health = gpu_health(model, {"status": "ok", "backend": "tensorrt"})
    assert (health["status"], health["backend"], health["gpu"]) == ("degraded", "onnx-cpu", "down")
    print(f"GPU lost: {state['rerun_windows']} window(s) re-run on the CPU")
    # Still sick: no recovery however long we wait on unhealthy readings.
    time.sleep(0.5)
    assert model.state()["gpu"] == "down"
    # The GPU comes back; after recovery_healthy_s of healthy readings, so does TensorRT.
    env.cuda.lost = False
    env.nvml.lost = None
    wait_for(lambda: model.state()["gpu"] == "ok")
    executes = env.trt.executes
    again = stream_windows(model, enc.z)
    assert env.trt.executes > executes, "calls did not go back to the GPU"
    assert np.abs(again - reference).max() <= 1e-4
    assert model.state()["recoveries"] == 1 and model.state()["backend"] == "tensorrt"
    # The engines loaded again count their runs in the runtime's meter, as the first did.
    primary, cpu = model._primary, model.cpu
    assert isinstance(primary, TensorRTVoiceModel) and isinstance(cpu, OnnxVoiceModel)
    assert primary.meter is cpu.meter


class Scripted(VoiceModel):
    """A primary that wraps another model's maths, records its calls and fails on command."""

    backend_name = "tensorrt"

    def __init__(self, cpu: VoiceModel) -> None:
        self.cpu = cpu
        self.fail: BaseException | None = None
        self.calls = 0
        self.called: list[str] = []
        self.closed = False

    def _call(self, name: str) -> None:
        self.calls += 1
        self.called.append(name)
        if self.fail is not None:
            raise self.fail

    def encode(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        self._call("encode")
        return self.cpu.encode(ids, scales, speaker)

    @property
    def flow_context(self) -> int:
        return self.cpu.flow_context

    @property
    def retimes(self) -> bool:
        return self.cpu.retimes

    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        self._call("encode_prior")
        return self.cpu.encode_prior(ids, scales, speaker)

    def flow(self, window: Window) -> FloatArray:
        self._call("flow")
        return self.cpu.flow(window)

    def decode(self, window: Window) -> FloatArray:
        name = "decode urgent" if window.urgent else "decode"
        self._call(f"{name} margins" if window.margins != (0, 0) else name)
        return self.cpu.decode(window)

    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        self.called.append("fused")
        return self.cpu.fused(ids, scales, speaker)

    def release_memory(self) -> None:
        self.called.append("release_memory")

    def close(self) -> None:
        self.closed = True


class WholeEncoder(Scripted):
    """A primary without a separate flow, as TensorRT is."""

    @property
    def flow_context(self) -> int:
        return 0

    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        self._call("encode_prior")
        return self.cpu.encode(ids, scales, speaker)

    def flow(self, window: Window) -> FloatArray:
        raise AssertionError("a primary without a flow was asked for one")


@functools.lru_cache(maxsize=1)
def flow_cpu() -> OnnxVoiceModel:
    """The real voice on the CPU with its prior + flow split, as the daemon loads it."""
    voice, _ = real_voice()
    assert voice.flow_split is not None and voice.cut is not None
    return OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.decoder_path,
        voice.cut,
        1,
        flow=voice.flow_split,
    )


# ------------------------------------------------------------------ the whole interface


def _interface_members() -> set[str]:
    return {name for name in dir(VoiceModel) if not name.startswith("_")}


def test_the_interface_has_no_fallbacks_to_inherit() -> None:
    # Every public member but the name is abstract: a wrapper or backend that forgets
    # one cannot be instantiated, instead of silently running the base's fallback.
    assert _interface_members() - set(VoiceModel.__abstractmethods__) == {"backend_name"}


def test_the_pool_forwards_every_member_of_the_interface() -> None:
    pool = FailoverVoiceModel(None, flow_cpu())
    own = set(vars(FailoverVoiceModel)) | set(vars(pool))
    missing = _interface_members() - own
    assert not missing, f"FailoverVoiceModel inherits {missing} instead of forwarding it"


def _flow_window(model: VoiceModel) -> tuple[Encoded, Window]:
    enc = model.encode_prior(IDS, GATE_SCALES, None)
    assert enc.z_p is not None
    return enc, Window(enc.z_p[:, :, :48], None)


@pytest.mark.parametrize("up", [True, False], ids=["gpu-up", "gpu-down"])
def test_each_call_reaches_the_primary_while_up_and_the_cpu_otherwise(up: bool) -> None:
    cpu = flow_cpu()
    primary = Scripted(cpu)
    pool = FailoverVoiceModel(primary, cpu)
    if not up:
        pool.notify_alarm("xid", "test")
    ref_enc = cpu.encode_prior(IDS, GATE_SCALES, None)
    assert ref_enc.z_p is not None and ref_enc.ready == 0
    z_p = ref_enc.z_p[:, :, :48]
    z = cpu.encode(IDS, GATE_SCALES, None).z[:, :, :48]
    calls: dict[str, Callable[[VoiceModel], Any]] = {
        "encode": lambda m: m.encode(IDS, GATE_SCALES, None).z,
        "encode_prior": lambda m: m.encode_prior(IDS, GATE_SCALES, None).z_p,
        "flow": lambda m: m.flow(Window(z_p, None)),
        "decode": lambda m: m.decode(Window(z, None)),
        "decode urgent": lambda m: m.decode(Window(z, None, urgent=True)),
        "decode urgent margins": lambda m: m.decode(Window(z, None, (0, 10), urgent=True)),
        "fused": lambda m: m.fused(IDS, GATE_SCALES, None),
    }
    for name, call in calls.items():
        primary.called.clear()
        got = call(pool)
        np.testing.assert_array_equal(got, call(cpu))
        assert primary.called == ([name] if up else []), name
    assert pool.flow_context == cpu.flow_context == 32
    pool.close()
    wait_for(lambda: primary.closed)  # by close(), or on the GPU thread when it went down


def test_encode_prior_keeps_the_flow_for_windows() -> None:
    pool = FailoverVoiceModel(None, flow_cpu())
    enc = pool.encode_prior(IDS, GATE_SCALES, None)
    assert enc.ready == 0 and enc.z_p is not None and pool.flow_context > 0


def test_flow_on_a_primary_without_one_runs_on_the_cpu_and_the_gpu_stays_up() -> None:
    cpu = flow_cpu()
    primary = WholeEncoder(cpu)
    pool = FailoverVoiceModel(primary, cpu)
    enc = pool.encode_prior(IDS, GATE_SCALES, None)
    assert enc.ready == enc.frames and primary.called == ["encode_prior"]
    # A clause whose prior ran on the CPU (the GPU was down then) and whose flow
    # windows come after the GPU is back: they must still run, on the CPU.
    _, window = _flow_window(cpu)
    np.testing.assert_array_equal(pool.flow(window), cpu.flow(window))
    assert pool.state()["gpu"] == "ok" and pool.state()["failovers"] == 0
    pool.close()


class LengthScaleOnly(WholeEncoder):
    """A primary that takes a rate through its length scale, as TensorRT does."""

    @property
    def retimes(self) -> bool:
        return False


def test_exact_retiming_is_the_one_of_the_backend_that_would_encode() -> None:
    """While a primary that cannot re-time is up, the stream must calibrate a rate itself
    (appliance.core.pipeline.encode.rate_scales); once the CPU model serves, it re-times."""
    cpu = flow_cpu()
    assert cpu.retimes
    primary = LengthScaleOnly(cpu)
    pool = FailoverVoiceModel(primary, cpu)
    assert not pool.retimes
    primary.fail = RuntimeError("CUDA error: launch failed")
    pool.encode_prior(IDS, GATE_SCALES, None)
    assert pool.state()["gpu"] == "down" and pool.retimes
    pool.close()


def test_flow_error_on_the_primary_is_rerun_on_the_cpu() -> None:
    cpu = flow_cpu()
    primary = Scripted(cpu)
    pool = FailoverVoiceModel(primary, cpu)
    _, window = _flow_window(cpu)
    primary.fail = RuntimeError("CUDA error: an illegal memory access")
    np.testing.assert_array_equal(pool.flow(window), cpu.flow(window))
    state = pool.state()
    assert (state["gpu"], state["rerun_flows"], state["failovers"]) == ("down", 1, 1)
    pool.close()


def test_encode_prior_error_on_the_primary_is_rerun_on_the_cpu() -> None:
    cpu = flow_cpu()
    primary = Scripted(cpu)
    pool = FailoverVoiceModel(primary, cpu)
    primary.fail = RuntimeError("CUDA error: launch failed")
    enc = pool.encode_prior(IDS, GATE_SCALES, None)
    assert enc.ready == 0 and enc.z_p is not None
    assert (pool.state()["gpu"], pool.state()["rerun_encodes"]) == ("down", 1)
    pool.close()


def test_unsupported_input_goes_to_the_cpu_and_the_gpu_stays_up() -> None:
    _, cpu = real_voice()
    primary = Scripted(cpu)
    pool = FailoverVoiceModel(primary, cpu)
    primary.fail = UnsupportedInput("too long for the profile")
    enc = pool.encode(IDS, GATE_SCALES, None)
    assert enc.z.shape[1] == 192
    assert pool.state()["gpu"] == "ok" and pool.state()["failovers"] == 0
    pool.close()


def test_encode_error_fails_over_and_recovers_without_watchdog() -> None:
    _, cpu = real_voice()
    primary = Scripted(cpu)
    now = [0.0]
    pool = FailoverVoiceModel(
        primary, cpu, factory=lambda: Scripted(cpu), recovery_healthy_s=5.0, clock=lambda: now[0]
    )
    primary.fail = RuntimeError("CUDA error: an illegal memory access")
    enc = pool.encode(IDS, GATE_SCALES, None)
    np.testing.assert_array_equal(enc.durations, cpu.encode(IDS, GATE_SCALES, None).durations)
    state = pool.state()
    assert (state["gpu"], state["rerun_encodes"], state["failovers"]) == ("down", 1, 1)
    assert "illegal memory access" in state["gpu_down_reason"]
    now[0] = 6.0  # without a watchdog, time since the failure counts as healthy
    pool.decode(Window(enc.z[:, :, :48], None))
    wait_for(lambda: pool.state()["gpu"] == "ok")
    pool.close()


def test_alarm_during_recovery_keeps_the_cpu() -> None:
    _, cpu = real_voice()
    started, release = threading.Event(), threading.Event()

    def slow_factory() -> VoiceModel:
        started.set()
        release.wait(10)
        return Scripted(cpu)

    now = [0.0]
    pool = FailoverVoiceModel(
        Scripted(cpu),
        cpu,
        factory=slow_factory,
        recovery_healthy_s=1.0,
        watchdog_active=True,
        clock=lambda: now[0],
    )
    pool.notify_alarm("xid", "GPU has fallen off the bus")
    pool.notify_health(True)
    now[0] = 2.0
    pool.notify_health(True)
    assert started.wait(5) and pool.state()["gpu"] == "recovering"
    pool.notify_alarm("link_degraded", "PCIe width x4, was x16")
    release.set()
    time.sleep(0.2)
    state = pool.state()
    assert state["gpu"] == "down" and state["recoveries"] == 0 and state["failovers"] == 1
    assert state["last_alarm"]["kind"] == "link_degraded"
    pool.close()


def test_no_primary_is_a_plain_cpu_pass_through() -> None:
    _, cpu = real_voice()
    pool = FailoverVoiceModel(None, cpu)
    window = Window(pool.encode(IDS, GATE_SCALES, None).z[:, :, :48], None)
    np.testing.assert_array_equal(pool.decode(window), cpu.decode(window))
    assert (pool.state()["gpu"], pool.state()["backend"]) == ("absent", "onnx-cpu")
