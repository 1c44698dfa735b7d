"""bench/device_check: its logic against the fakes of NVML and CUDA, and its table on this box.

The fakes come in through the daemon's own seams (``appliance.ops.nvml.load`` and
``appliance.model.engine.trt_seam.load_cudart``), as a real driver would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from appliance.model.engine import trt_seam
from appliance.ops import nvml as nvml_seam
from appliance.ops import watchdog
from bench import device_check as dc
from tests.fakes.cudart import FakeCudart, cudaError_t
from tests.fakes.gpu_nvml import FakeNvml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml()
    monkeypatch.setattr(nvml_seam, "load", lambda: fake)
    return fake


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCudart:
    fake = FakeCudart()
    monkeypatch.setattr(trt_seam, "load_cudart", lambda: fake)
    return fake


def run(replays: int = 20) -> dict[str, dc.Row]:
    rows = dc.run_checks(replays=replays, settle_s=0.7)
    assert [r.check for r in rows] == [*dc.NVML_CHECKS, *dc.CUDA_CHECKS, "TensorRT"]
    return {r.check: r for r in rows}


def test_every_check_passes_on_a_healthy_fake_gpu(nvml: FakeNvml, cuda: FakeCudart) -> None:
    rows = run(replays=25)
    for name in (*dc.NVML_CHECKS, *dc.CUDA_CHECKS):
        assert rows[name].result == dc.OK, rows[name]
    assert rows["watchdog baseline"].figure.startswith("PCIe gen 5 x16")
    assert "event waits in 0.7 s" in rows["watchdog threads"].figure
    assert "0 replays/min, 45 °C" in rows["watchdog poll"].figure
    drop = rows["simulated link drop"].figure
    assert "1 alarm (link_degraded: PCIe width x8, was x16)" in drop
    assert "gpu down, backend onnx-cpu (stand-in)" in drop and "cleared" in drop
    assert rows["simulated GPU lost"].figure.startswith("1 alarm (gpu_lost")
    assert "1 alarm (xid: GPU has fallen off the bus)" in rows["simulated Xid 79"].figure
    assert rows["CUDA device"].figure.startswith("NVIDIA H200, sm 9.0")
    assert rows["CUDA graph replay"].figure.startswith("25 replays, each on fresh input")
    # Only the replays launched the graph, and everything the check took is given back.
    assert cuda.graph_launches == 25
    assert not (cuda.allocs or cuda.host_allocs or cuda.graphs or cuda.graph_execs)
    # The simulated faults went through the proxy: the fake's own readings never changed.
    assert (nvml.width, nvml.lost) == (16, None)
    assert not dc.failed(rows.values())


def test_a_replay_that_does_not_run_the_work_fails(nvml: FakeNvml, cuda: FakeCudart) -> None:
    cuda.cudaGraphLaunch = lambda graph_exec, stream: (cudaError_t.cudaSuccess,)  # type: ignore[method-assign]
    rows = run()
    assert rows["CUDA graph replay"].result == dc.FAIL
    assert "output differs" in rows["CUDA graph replay"].figure
    assert rows["CUDA free"].result == dc.SKIPPED
    assert not (cuda.allocs or cuda.host_allocs or cuda.graph_execs)  # freed all the same
    assert dc.failed(rows.values())


def test_a_failed_capture_fails_and_frees_everything(nvml: FakeNvml, cuda: FakeCudart) -> None:
    cuda.capture_error = cudaError_t.cudaErrorStreamCaptureUnsupported
    rows = run()
    assert rows["CUDA stream + copies"].result == dc.OK
    assert rows["CUDA graph capture"].result == dc.FAIL
    assert "cudaStreamEndCapture" in rows["CUDA graph capture"].figure
    assert rows["CUDA graph replay"].result == dc.SKIPPED
    assert not (cuda.allocs or cuda.host_allocs or cuda.graphs or cuda.graph_execs)


def test_a_watchdog_that_misses_xid_79_fails(
    nvml: FakeNvml, cuda: FakeCudart, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(watchdog.CRITICAL_XIDS, 79)
    rows = run()
    assert rows["simulated Xid 79"].result == dc.FAIL
    assert "alarms []" in rows["simulated Xid 79"].figure
    assert rows["simulated link drop"].result == dc.OK


def test_a_real_alarm_while_idle_fails(nvml: FakeNvml, cuda: FakeCudart) -> None:
    nvml.inject_xid(79)  # waiting for the event thread when the check starts it
    rows = run()
    assert rows["watchdog threads"].result == dc.FAIL
    assert "real alarms while idle" in rows["watchdog threads"].figure


def test_xid_events_refused_by_the_driver_is_a_warning(nvml: FakeNvml, cuda: FakeCudart) -> None:
    nvml.xid_supported = False
    rows = run()
    assert rows["Xid event registration"].result == dc.WARN
    assert "polls only" in rows["Xid event registration"].figure
    assert not dc.failed(rows.values())


def test_cuda_without_a_device_is_missing_not_failed(nvml: FakeNvml, cuda: FakeCudart) -> None:
    cuda.devices = 0
    rows = run()
    assert rows["CUDA device"].result == dc.MISSING
    assert all(rows[n].result == dc.SKIPPED for n in dc.CUDA_CHECKS[1:])
    assert not dc.failed(rows.values())


def test_on_this_box_the_table_says_what_is_missing_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.device_check", "--out", str(out), "--replays", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = out.read_text()
    assert table.strip() in proc.stdout
    lines = table.strip().splitlines()
    assert lines[0] == "| check | result | figure |" and len(lines) == 2 + 15
    results = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in lines[2:]}
    # What the seams find here decides each row: missing where they find nothing.
    has_nvml = nvml_seam.load() is not None
    has_cuda = trt_seam.load_cudart() is not None
    assert (results["NVML"] == dc.MISSING) == (not has_nvml)
    assert (results["CUDA device"] == dc.MISSING) == (not has_cuda or not _devices())
    assert (results["TensorRT"] == dc.MISSING) == (trt_seam.load() is None)
    assert dc.FAIL not in results.values()


def _devices() -> int:
    cudart = trt_seam.load_cudart()
    return 0 if cudart is None else dc.device_count(trt_seam.TrtRuntime(None, cudart))
