"""One-command device check: the NVML watchdog and the CUDA seam against a real driver.

``python -m bench.device_check [--out FILE]`` (or ``python -m bench --only device``)
prints a Markdown table (check | result | figure).  What it exercises is the
daemon's own code on whatever the machine has:

* NVML through :mod:`appliance.ops.nvml`: a :class:`~appliance.ops.watchdog.GpuWatchdog`
  takes the PCIe baseline, both of its threads run for ``settle_s`` (the poller,
  and the Xid event waiter blocking in ``nvmlEventSetWait``), then polls are
  timed by hand.  The alarm path is simulated on top of the real driver: a
  watchdog with the real baseline reads through a proxy that halves the link
  width (or reports the GPU lost) for one poll, and gets an Xid 79 event's
  data in ``handle_event``; each must reach a real
  :class:`~appliance.model.engine.pool.FailoverVoiceModel` (with stand-in models,
  nothing runs on them) exactly once, wired as ``gpu_select`` wires it;
* CUDA through the runtime bindings (:func:`appliance.model.engine.trt_seam.load_cudart`,
  no TensorRT needed) and the TensorRT backend's own helpers (``_Cuda``, ``_Graph``):
  device and pinned allocations, a stream, a small workload (copy in, memset,
  device-to-device copy, copy out) enqueued plainly, then captured as a graph,
  instantiated and replayed ``replays`` times with fresh input, every output
  checked on the host.

Bounds: a few seconds plus CUDA's start-up; 2 × 64 KiB of device and pinned
memory.  It never resets the GPU, changes clocks, persistence or MIG, or writes
anywhere but its own allocations.  Where something is missing (no NVML, no
cuda-python, no GPU) the rows say so and the exit status is 0; it is 1 only when
a check that could run failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np

from appliance.model.engine import trt_seam
from appliance.model.engine.base import VoiceModel
from appliance.model.engine.pool import FailoverVoiceModel
from appliance.model.engine.tensorrt import _Cuda, _Graph, device_count, device_info
from appliance.model.engine.trt_seam import TrtRuntime
from appliance.ops import nvml as nvml_seam
from appliance.ops.watchdog import GpuWatchdog, Reading

OK, FAIL, MISSING, WARN, SKIPPED = "ok", "FAIL", "missing", "warn", "skipped"
WORK_BYTES = 64 * 1024
"""Size of each buffer of the CUDA workload."""
MEMSET_BYTE = 0x5A
NVML_CHECKS: tuple[str, ...] = (
    "NVML",
    "watchdog baseline",
    "watchdog threads",
    "Xid event registration",
    "watchdog poll",
    "simulated link drop",
    "simulated GPU lost",
    "simulated Xid 79",
)
CUDA_CHECKS: tuple[str, ...] = (
    "CUDA device",
    "CUDA allocation",
    "CUDA stream + copies",
    "CUDA graph capture",
    "CUDA graph replay",
    "CUDA free",
)


@dataclass(frozen=True)
class Row:
    check: str
    result: str
    """``ok``, ``FAIL``, ``missing`` (not on this machine), ``warn`` or ``skipped``."""
    figure: str


Step = tuple[str, Callable[[], tuple[str, str]]]
"""A check's name and what runs it: (result, figure), or an exception for FAIL."""


def run_steps(steps: list[Step]) -> list[Row]:
    """Run ``steps`` in order; after a failure the later ones are skipped (they build on it)."""
    rows: list[Row] = []
    failed = ""
    for name, step in steps:
        if failed:
            rows.append(Row(name, SKIPPED, f"after the failure of {failed}"))
            continue
        try:
            result, figure = step()
        except Exception as exc:  # the table's job is to say what broke, not to stop at it
            result, figure = FAIL, f"{type(exc).__name__}: {exc}"
        rows.append(Row(name, result, figure))
        if result == FAIL:
            failed = name
    return rows


def format_table(rows: list[Row]) -> str:
    lines = ["| check | result | figure |", "|---|---|---|"]
    lines += [f"| {r.check} | {r.result} | {r.figure.replace('|', '/')} |" for r in rows]
    return "\n".join(lines)


def failed(rows: list[Row]) -> bool:
    return any(r.result == FAIL for r in rows)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


# --------------------------------------------------------------------------- NVML


class NvmlSpy:
    """The NVML module seen through a proxy: counts calls and errors, and can stand one
    function in for another for a while (the simulated faults), the driver untouched."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.calls: Counter[str] = Counter()
        self.errors: dict[str, list[int]] = {}
        self.overrides: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if not name.startswith("nvml") or not callable(target):
            return target
        fn = self.overrides.get(name, target)

        def call(*args: Any) -> Any:
            self.calls[name] += 1
            try:
                return fn(*args)
            except self._nvml.NVMLError as exc:
                self.errors.setdefault(name, []).append(int(getattr(exc, "value", -1)))
                raise

        return call

    def maybe(self, name: str, *args: Any) -> Any:
        """An informational query; None when this NVML lacks it or refuses it."""
        try:
            return getattr(self, name)(*args)
        except (AttributeError, self._nvml.NVMLError):
            return None


class _StandIn:
    """A model the pool can hold and close; the check never sends it work."""

    def __init__(self, name: str) -> None:
        self.backend_name = name

    def close(self) -> None:
        pass


def _pool() -> FailoverVoiceModel:
    gpu = cast(VoiceModel, _StandIn("tensorrt (stand-in)"))
    return FailoverVoiceModel(gpu, cast(VoiceModel, _StandIn("onnx-cpu (stand-in)")))


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def nvml_rows(nvml: Any | None, index: int = 0, settle_s: float = 1.5) -> list[Row]:
    """The watchdog against the driver behind ``nvml`` (a module with pynvml's names)."""
    if nvml is None:
        why = (
            "no NVIDIA driver (nvmlInit failed)"
            if _installed("pynvml")
            else "pynvml not installed (nvidia-ml-py, extra gpu)"
        )
        return [Row("NVML", MISSING, why)] + [Row(n, SKIPPED, "no NVML") for n in NVML_CHECKS[1:]]
    spy = NvmlSpy(nvml)
    real = _RealWatchdog(spy, index, settle_s)
    try:
        rows = run_steps(
            [
                ("NVML", lambda: _nvml_info(spy, index)),
                ("watchdog baseline", real.start),
                ("watchdog threads", real.threads),
                ("Xid event registration", real.xid_registration),
                ("watchdog poll", real.polls),
            ]
        )
    finally:
        real.stop()
    sim = _Simulated(spy, index, real.dog.baseline if real.dog else None)
    return rows + run_steps(
        [
            ("simulated link drop", sim.link_drop),
            ("simulated GPU lost", sim.gpu_lost),
            ("simulated Xid 79", sim.xid79),
        ]
    )


def _nvml_info(spy: NvmlSpy, index: int) -> tuple[str, str]:
    count = int(spy.nvmlDeviceGetCount())
    handle = spy.nvmlDeviceGetHandleByIndex(index)
    name = spy.maybe("nvmlDeviceGetName", handle)
    driver = spy.maybe("nvmlSystemGetDriverVersion")
    parts = [f"{count} GPU(s)", f"GPU {index}: {_text(name) if name else 'name n/a'}"]
    if driver:
        parts.append(f"driver {_text(driver)}")
    return OK, ", ".join(parts)


class _RealWatchdog:
    """The production watchdog on the real driver, threads and all, as the daemon runs it."""

    def __init__(self, spy: NvmlSpy, index: int, settle_s: float) -> None:
        self.spy, self.index, self.settle_s = spy, index, settle_s
        self.readings: list[Reading] = []
        self.alarms: list[Any] = []
        self.dog: GpuWatchdog | None = None

    def start(self) -> tuple[str, str]:
        self.dog = GpuWatchdog(
            self.spy, self.index, 0.1, self.alarms.append, on_reading=self.readings.append
        )
        self.dog.start()
        handle = self.spy.nvmlDeviceGetHandleByIndex(self.index)
        top_gen = self.spy.maybe("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        top_width = self.spy.maybe("nvmlDeviceGetMaxPcieLinkWidth", handle)
        top = f" (max gen {top_gen} x{top_width})" if top_gen and top_width else ""
        if self.dog.baseline is None:
            return WARN, "PCIe link not reported by this driver: link drops are not watched"
        gen, width = self.dog.baseline
        return OK, f"PCIe gen {gen} x{width}{top}"

    def threads(self) -> tuple[str, str]:
        time.sleep(self.settle_s)
        polls = len(self.readings)
        if self.alarms:
            return FAIL, f"real alarms while idle: {self.alarms}"
        if polls == 0:
            return FAIL, f"the poller read nothing in {self.settle_s:.1f} s"
        unhealthy = [r.problems for r in self.readings if not r.healthy]
        if unhealthy:
            return FAIL, f"unhealthy readings: {unhealthy[0]}"
        waits = self.spy.calls["nvmlEventSetWait"]
        return OK, f"{polls} polls at 100 ms, {waits} event waits in {self.settle_s:.1f} s"

    def xid_registration(self) -> tuple[str, str]:
        refused = self.spy.errors.get("nvmlDeviceRegisterEvents")
        if refused:
            return WARN, f"refused (NVML error {refused[0]}): the watchdog polls only"
        waits = self.spy.calls["nvmlEventSetWait"]
        timeout = int(getattr(self.spy, "NVML_ERROR_TIMEOUT", 10))
        other = [e for e in self.spy.errors.get("nvmlEventSetWait", []) if e != timeout]
        if waits == 0 or other:
            return FAIL, f"{waits} waits, errors other than a timeout: {other}"
        return OK, f"nvmlEventTypeXidCriticalError registered; {waits} waits, no event"

    def polls(self) -> tuple[str, str]:
        assert self.dog is not None
        self.dog.stop()  # polled by hand from here, timed
        times: list[float] = []
        reading = Reading()
        for _ in range(20):
            t0 = time.perf_counter()
            reading = self.dog.poll_once()
            times.append((time.perf_counter() - t0) * 1000)
        if not reading.healthy:
            return FAIL, "; ".join(reading.problems)
        events = reading.clock_event_reasons
        return OK, (
            f"gen {reading.pcie_gen} x{reading.pcie_width}, "
            f"{reading.replays_last_minute} replays/min, {reading.temperature_c} °C, "
            f"clock events {'n/a' if events is None else hex(events)}; "
            f"poll {statistics.median(times):.2f} ms median (max {max(times):.2f})"
        )

    def stop(self) -> None:
        if self.dog is not None:
            self.dog.stop()


class _Simulated:
    """Alarms from injected faults, with the real driver's baseline and readings around them.

    Each scenario gets a fresh watchdog and a fresh pool, wired as ``gpu_select`` wires
    them; it passes when the pool heard exactly one alarm and went down once.
    """

    def __init__(self, spy: NvmlSpy, index: int, baseline: tuple[int, int] | None) -> None:
        self.spy, self.index, self.baseline = spy, index, baseline

    def _scenario(self, act: Callable[[GpuWatchdog], None], kind: str) -> tuple[str, str]:
        pool = _pool()
        heard: list[str] = []

        def on_alarm(alarm: Any) -> None:
            heard.append(f"{alarm.kind}: {alarm.reason}")
            pool.notify_alarm(alarm.kind, alarm.reason, alarm.time)

        dog = GpuWatchdog(self.spy, self.index, 3600.0, on_alarm)
        dog.baseline = self.baseline
        try:
            act(dog)
            state = pool.state()
        finally:
            pool.close()
        if len(heard) != 1 or not heard[0].startswith(kind) or state["failovers"] != 1:
            return FAIL, f"alarms {heard}, pool {state['gpu']}, failovers {state['failovers']}"
        return OK, f"1 alarm ({heard[0]}); pool: gpu {state['gpu']}, backend {state['backend']}"

    def link_drop(self) -> tuple[str, str]:
        if self.baseline is None:
            return SKIPPED, "no PCIe baseline on this driver"
        half = self.baseline[1] // 2
        name = "nvmlDeviceGetCurrPcieLinkWidth"

        def act(dog: GpuWatchdog) -> None:
            assert dog.poll_once().healthy, "the real reading before the fault is unhealthy"
            self.spy.overrides[name] = lambda handle: half
            try:
                dog.poll_once()
                dog.poll_once()  # the same problem again: no second alarm
            finally:
                del self.spy.overrides[name]
            assert dog.poll_once().healthy, "the real reading after the fault is unhealthy"

        result, figure = self._scenario(act, "link_degraded")
        return result, figure + (", cleared on the next real reading" if result == OK else "")

    def gpu_lost(self) -> tuple[str, str]:
        name = "nvmlDeviceGetCurrPcieLinkGeneration"
        lost = int(self.spy.NVML_ERROR_GPU_IS_LOST)

        def raise_lost(handle: Any) -> Any:
            raise self.spy.NVMLError(lost)

        def act(dog: GpuWatchdog) -> None:
            self.spy.overrides[name] = raise_lost
            try:
                dog.poll_once()
                dog.poll_once()
            finally:
                del self.spy.overrides[name]

        return self._scenario(act, "gpu_lost")

    def xid79(self) -> tuple[str, str]:
        xid_type = int(self.spy.nvmlEventTypeXidCriticalError)

        def act(dog: GpuWatchdog) -> None:
            dog.handle_event(SimpleNamespace(eventType=xid_type, eventData=13))  # logged only
            dog.handle_event(SimpleNamespace(eventType=xid_type, eventData=79))

        result, figure = self._scenario(act, "xid")
        return result, figure + ("; Xid 13 logged only" if result == OK else "")


# --------------------------------------------------------------------------- CUDA


def cuda_rows(cudart: Any | None, index: int = 0, replays: int = 1000) -> list[Row]:
    """The CUDA calls the TensorRT backend makes, for real, on a small workload."""
    if cudart is None:
        why = "cuda-bindings not installed (cuda-python, extra gpu)"
        return [Row("CUDA device", MISSING, why)] + [Row(n, SKIPPED, why) for n in CUDA_CHECKS[1:]]
    count = device_count(TrtRuntime(trt=None, cudart=cudart))
    if count <= index:
        why = f"{count} CUDA device(s): no device {index}"
        return [Row("CUDA device", MISSING, why)] + [Row(n, SKIPPED, why) for n in CUDA_CHECKS[1:]]
    work = _CudaWork(cudart, index, replays)
    try:
        return run_steps(
            [
                ("CUDA device", lambda: work.device(count)),
                ("CUDA allocation", work.allocate),
                ("CUDA stream + copies", work.plain),
                ("CUDA graph capture", work.capture),
                ("CUDA graph replay", work.replay),
                ("CUDA free", work.free),
            ]
        )
    finally:
        work.free()


class _CudaWork:
    """Copy in, memset, device-to-device copy, copy out: plainly, then as a CUDA graph.

    The buffers live in the TensorRT backend's own ``_Graph`` holder (device buffers,
    pinned staging arrays, the executable graph), which frees them as it does in
    production.  Expected output: the input's first half, then ``MEMSET_BYTE``.
    """

    def __init__(self, cudart: Any, index: int, replays: int) -> None:
        self.rt, self.index, self.replays = cudart, index, replays
        self.cuda = _Cuda(cudart)
        self.graph = _Graph(self.cuda)
        self.stream: Any = None
        self.src = self.dst = 0
        self.host_in = self.host_out = np.zeros(0, np.uint8)
        self.plain_ms: list[float] = []
        self.free_before: int | None = None
        self.freed = False

    def device(self, count: int) -> tuple[str, str]:
        self.cuda.call("cudaSetDevice", self.rt.cudaSetDevice(self.index))
        info = device_info(TrtRuntime(trt=None, cudart=self.rt), self.index)
        versions = [
            f"{what} {self._optional(fn)}"
            for what, fn in (
                ("driver", "cudaDriverGetVersion"),
                ("runtime", "cudaRuntimeGetVersion"),
            )
            if self._optional(fn) is not None
        ]
        figure = f"{info.name}, sm {info.compute_capability}, {count} device(s)"
        return OK, ", ".join([figure, *versions])

    def _optional(self, name: str) -> Any:
        fn = getattr(self.rt, name, None)
        if fn is None:
            return None
        result = fn()
        return result[1] if result[0] == self.rt.cudaError_t.cudaSuccess else None

    def _mem_free(self) -> int | None:
        fn = getattr(self.rt, "cudaMemGetInfo", None)
        if fn is None:
            return None
        return int(self.cuda.call("cudaMemGetInfo", fn())[0])

    def allocate(self) -> tuple[str, str]:
        self.free_before = self._mem_free()
        self.stream = self.cuda.call("cudaStreamCreate", self.rt.cudaStreamCreate())
        self.src = self.graph.device_buffer(WORK_BYTES)
        self.dst = self.graph.device_buffer(WORK_BYTES)
        self.host_in = self.graph.staging((WORK_BYTES,), np.dtype(np.uint8))
        self.host_out = self.graph.staging((WORK_BYTES,), np.dtype(np.uint8))
        kib = WORK_BYTES // 1024
        return OK, f"2 × {kib} KiB device (cudaMalloc), 2 × {kib} KiB pinned (cudaMallocHost)"

    def _enqueue(self) -> None:
        half = WORK_BYTES // 2
        cuda, rt, stream = self.cuda, self.rt, self.stream
        cuda.h2d(self.src, self.host_in, stream)
        cuda.call("cudaMemsetAsync", rt.cudaMemsetAsync(self.dst + half, MEMSET_BYTE, half, stream))
        d2d = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        cuda.call("cudaMemcpyAsync(D2D)", rt.cudaMemcpyAsync(self.dst, self.src, half, d2d, stream))
        cuda.d2h(self.host_out, self.dst, stream)

    def _fill(self, i: int) -> np.ndarray[Any, Any]:
        """Fresh input for run ``i`` and the output it must give."""
        self.host_in[...] = (np.arange(WORK_BYTES, dtype=np.uint32) * 7 + i).astype(np.uint8)
        self.host_out[...] = 0
        expected = self.host_in.copy()
        expected[WORK_BYTES // 2 :] = MEMSET_BYTE
        return expected

    def plain(self) -> tuple[str, str]:
        for i in range(50):
            expected = self._fill(i)
            t0 = time.perf_counter()
            self._enqueue()
            self.cuda.sync(self.stream)
            self.plain_ms.append((time.perf_counter() - t0) * 1000)
            if not np.array_equal(self.host_out, expected):
                return FAIL, f"run {i}: output differs from the input on the host"
        ms = statistics.median(self.plain_ms)
        return OK, f"50 runs of 4 operations, all equal; {ms * 1000:.0f} µs median"

    def capture(self) -> tuple[str, str]:
        cuda, rt = self.cuda, self.rt
        mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        cuda.call("cudaStreamBeginCapture", rt.cudaStreamBeginCapture(self.stream, mode))
        try:
            self._enqueue()
        except BaseException:
            # Leave capture mode whatever happened, as the TensorRT backend does.
            err, *rest = rt.cudaStreamEndCapture(self.stream)
            if err == rt.cudaError_t.cudaSuccess and rest and rest[0] is not None:
                rt.cudaGraphDestroy(rest[0])
            raise
        captured = cuda.call("cudaStreamEndCapture", rt.cudaStreamEndCapture(self.stream))
        try:
            self.graph.exec = cuda.call(
                "cudaGraphInstantiateWithFlags", rt.cudaGraphInstantiateWithFlags(captured, 0)
            )
        finally:
            rt.cudaGraphDestroy(captured)
        return OK, "4 operations captured (thread-local mode), instantiated"

    def replay(self) -> tuple[str, str]:
        times: list[float] = []
        for i in range(self.replays):
            expected = self._fill(i + 1000)
            t0 = time.perf_counter()
            self.cuda.call("cudaGraphLaunch", self.rt.cudaGraphLaunch(self.graph.exec, self.stream))
            self.cuda.sync(self.stream)
            times.append((time.perf_counter() - t0) * 1000)
            if not np.array_equal(self.host_out, expected):
                return FAIL, f"replay {i}: output differs from its input on the host"
        ms, plain = statistics.median(times), statistics.median(self.plain_ms)
        return OK, (
            f"{self.replays} replays, each on fresh input, all equal; launch + sync "
            f"{ms * 1000:.0f} µs median against {plain * 1000:.0f} µs plain"
        )

    def free(self) -> tuple[str, str]:
        if self.freed:
            return OK, "already freed"
        self.freed = True
        self.graph.free()
        if self.stream is not None:
            self.cuda.call("cudaStreamDestroy", self.rt.cudaStreamDestroy(self.stream))
        after = self._mem_free()
        if self.free_before is None or after is None:
            return OK, "graph, buffers and stream released"
        delta = (self.free_before - after) / 2**20
        return OK, f"graph, buffers and stream released; device memory free {delta:+.1f} MiB lower"


# --------------------------------------------------------------------------- the check


def backend_row() -> Row:
    """What ``backend: auto`` would find for the GPU path (TensorRT is not needed here)."""
    rt = trt_seam.load()
    if rt is None:
        return Row("TensorRT", MISSING, "not installed: the daemon would run onnx-cpu")
    return Row("TensorRT", OK, f"TensorRT {rt.version}")


def run_checks(*, index: int = 0, replays: int = 1000, settle_s: float = 1.5) -> list[Row]:
    """Every check, on what the seams find on this machine."""
    rows = nvml_rows(nvml_seam.load(), index, settle_s)
    rows += cuda_rows(trt_seam.load_cudart(), index, replays)
    return [*rows, backend_row()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.device_check", description=__doc__)
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--device-index", type=int, default=0)
    parser.add_argument("--replays", type=int, default=1000)
    args = parser.parse_args(argv)
    print("(ERROR lines from the watchdog and the pool are the simulated alarms)", file=sys.stderr)
    rows = run_checks(index=args.device_index, replays=args.replays)
    table = format_table(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
