"""A fake of cuda-python's runtime bindings (``cuda.bindings.runtime``).

Device memory is host memory: ``cudaMalloc`` hands out the address of a numpy
buffer, so copies are plain ``memmove``.  Every allocation is bounds-checked,
which catches a backend that under-allocates.  ``lost = True`` imitates a GPU
that fell off the bus: every call then fails with ``cudaErrorDevicesUnavailable``.

Stream capture works as in CUDA: while a stream is capturing, work enqueued on
it (``cudaMemcpyAsync``, and the fake TensorRT's ``execute_async_v3``) is
recorded instead of run; ``cudaStreamEndCapture`` returns a graph of the
recorded operations, and launching its instantiation runs them again in order,
on whatever the buffers hold *then*.  As in CUDA, synchronizing a capturing
stream or allocating from the capturing thread invalidates the capture, and
ending a capture that was never begun is an error.  ``capture_error`` makes the
next ``cudaStreamEndCapture`` fail with that code (an operation the driver
could not capture).  ``allocs``, ``host_allocs``, ``graphs`` and ``graph_execs``
hold what is live, so a test can tell that everything was freed.  ``cudaMemsetAsync``
(the device check's workload) writes into device memory, or records the write while
capturing.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np


class cudaError_t(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorDevicesUnavailable = 46
    cudaErrorNoDevice = 100
    cudaErrorInvalidResourceHandle = 400
    cudaErrorIllegalState = 401
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901
    cudaErrorLaunchFailure = 719


class cudaMemcpyKind(enum.IntEnum):
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3


class cudaStreamCaptureMode(enum.IntEnum):
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


class cudaStream_t:
    def __init__(self, handle: int) -> None:
        self._handle = handle

    def __int__(self) -> int:
        return self._handle


Op = Callable[[], None]
"""One recorded operation; AssertionError on a bad address (a backend bug, as live), or
:class:`LaunchFailed` when its work fails on the device."""


class LaunchFailed(Exception):
    """A recorded operation failed on the device; the launch reports an error code."""


class cudaGraph_t:
    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops


class cudaGraphExec_t:
    def __init__(self, ops: list[Op]) -> None:
        self.ops = list(ops)  # independent of the graph, which may be destroyed


@dataclass
class _Capture:
    thread: int
    ops: list[Op] = field(default_factory=list)
    invalid: bool = False


OK = cudaError_t.cudaSuccess
LOST = cudaError_t.cudaErrorDevicesUnavailable


class FakeCudart:
    cudaError_t = cudaError_t
    cudaMemcpyKind = cudaMemcpyKind
    cudaStreamCaptureMode = cudaStreamCaptureMode

    def __init__(self, name: str = "NVIDIA H200", capability: tuple[int, int] = (9, 0)) -> None:
        self.name = name
        self.capability = capability
        self.devices = 1
        self.lost = False
        self.allocs: dict[int, np.ndarray[Any, Any]] = {}
        self.host_allocs: dict[int, np.ndarray[Any, Any]] = {}
        self.graphs: set[int] = set()
        self.graph_execs: set[int] = set()
        self.graph_launches = 0
        self.capture_error: cudaError_t | None = None
        self._captures: dict[int, _Capture] = {}
        self._streams = itertools.count(0x1000)

    def _err(self) -> cudaError_t:
        return LOST if self.lost else OK

    def cudaGetDeviceCount(self) -> tuple[cudaError_t, int]:
        if self.devices == 0:
            return cudaError_t.cudaErrorNoDevice, 0
        return self._err(), self.devices

    def cudaSetDevice(self, index: int) -> tuple[cudaError_t]:
        return (self._err() if index < self.devices else cudaError_t.cudaErrorInvalidValue,)

    def cudaGetDeviceProperties(self, index: int) -> tuple[cudaError_t, Any]:
        major, minor = self.capability
        props = SimpleNamespace(name=self.name.encode() + b"\0" * 8, major=major, minor=minor)
        return self._err(), props

    def cudaStreamCreate(self) -> tuple[cudaError_t, cudaStream_t]:
        return self._err(), cudaStream_t(next(self._streams))

    def cudaStreamDestroy(self, stream: Any) -> tuple[cudaError_t]:
        return (OK,)

    def cudaStreamSynchronize(self, stream: Any) -> tuple[cudaError_t]:
        capture = self._captures.get(int(stream))
        if capture is not None:
            capture.invalid = True  # CUDA: synchronizing a capturing stream breaks the capture
            return (cudaError_t.cudaErrorStreamCaptureUnsupported,)
        return (self._err(),)

    def _unsafe_while_capturing(self) -> bool:
        """CUDA forbids allocations from a thread that is capturing (and invalidates it)."""
        me = threading.get_ident()
        hit = [c for c in self._captures.values() if c.thread == me]
        for capture in hit:
            capture.invalid = True
        return bool(hit)

    def cudaMalloc(self, size: int) -> tuple[cudaError_t, int]:
        if self.lost:
            return LOST, 0
        if self._unsafe_while_capturing():
            return cudaError_t.cudaErrorStreamCaptureUnsupported, 0
        buf = np.zeros(size, dtype=np.uint8)
        ptr = int(buf.ctypes.data)
        self.allocs[ptr] = buf
        return OK, ptr

    def cudaFree(self, ptr: int) -> tuple[cudaError_t]:
        self.allocs.pop(int(ptr), None)
        return (OK,)

    def cudaMallocHost(self, size: int) -> tuple[cudaError_t, int]:
        """Pinned host memory: host-addressable, so numpy can wrap it."""
        if self.lost:
            return LOST, 0
        if self._unsafe_while_capturing():
            return cudaError_t.cudaErrorStreamCaptureUnsupported, 0
        buf = np.zeros(max(size, 1), dtype=np.uint8)
        ptr = int(buf.ctypes.data)
        self.host_allocs[ptr] = buf
        return OK, ptr

    def cudaFreeHost(self, ptr: int) -> tuple[cudaError_t]:
        if self.host_allocs.pop(int(ptr), None) is None:
            return (cudaError_t.cudaErrorInvalidValue,)
        return (OK,)

    def check(self, ptr: int, nbytes: int) -> None:
        buf = self.allocs.get(int(ptr))
        assert buf is not None, f"{ptr:#x} is not a device allocation"
        assert nbytes <= buf.nbytes, f"{nbytes} bytes into a {buf.nbytes}-byte allocation"

    # ------------------------------------------------------------------ capture

    def capturing(self, stream: Any) -> bool:
        return int(stream) in self._captures

    def record(self, stream: Any, op: Op) -> None:
        """Append ``op`` to the capture of ``stream`` (for the fake TensorRT)."""
        self._captures[int(stream)].ops.append(op)

    def invalidate(self, stream: Any) -> None:
        """An operation that cannot be captured was attempted on ``stream``."""
        self._captures[int(stream)].invalid = True

    def cudaStreamBeginCapture(
        self, stream: Any, mode: cudaStreamCaptureMode
    ) -> tuple[cudaError_t]:
        if self.lost:
            return (LOST,)
        if int(stream) in self._captures:
            return (cudaError_t.cudaErrorIllegalState,)
        self._captures[int(stream)] = _Capture(thread=threading.get_ident())
        return (OK,)

    def cudaStreamEndCapture(self, stream: Any) -> tuple[cudaError_t, cudaGraph_t | None]:
        capture = self._captures.pop(int(stream), None)
        if capture is None:
            return cudaError_t.cudaErrorIllegalState, None
        if self.capture_error is not None:
            err, self.capture_error = self.capture_error, None
            return err, None
        if capture.invalid:
            return cudaError_t.cudaErrorStreamCaptureInvalidated, None
        graph = cudaGraph_t(capture.ops)
        self.graphs.add(id(graph))
        return OK, graph

    def cudaGraphInstantiateWithFlags(
        self, graph: cudaGraph_t, flags: int
    ) -> tuple[cudaError_t, cudaGraphExec_t | None]:
        if self.lost:
            return LOST, None
        if id(graph) not in self.graphs:
            return cudaError_t.cudaErrorInvalidValue, None
        graph_exec = cudaGraphExec_t(graph.ops)
        self.graph_execs.add(id(graph_exec))
        return OK, graph_exec

    def cudaGraphInstantiate(
        self, graph: cudaGraph_t, flags: int
    ) -> tuple[cudaError_t, cudaGraphExec_t | None]:
        return self.cudaGraphInstantiateWithFlags(graph, flags)

    def cudaGraphLaunch(self, graph_exec: cudaGraphExec_t, stream: Any) -> tuple[cudaError_t]:
        if self.lost:
            return (LOST,)
        if id(graph_exec) not in self.graph_execs:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        self.graph_launches += 1
        try:
            for op in graph_exec.ops:
                op()
        except LaunchFailed:
            return (LOST if self.lost else cudaError_t.cudaErrorLaunchFailure,)
        return (OK,)

    def cudaGraphExecDestroy(self, graph_exec: cudaGraphExec_t) -> tuple[cudaError_t]:
        if id(graph_exec) not in self.graph_execs:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        self.graph_execs.discard(id(graph_exec))
        return (OK,)

    def cudaGraphDestroy(self, graph: cudaGraph_t) -> tuple[cudaError_t]:
        if id(graph) not in self.graphs:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        self.graphs.discard(id(graph))
        return (OK,)

    # ------------------------------------------------------------------ copies

    def _copy_checks(self, dst: int, src: int, count: int, kind: cudaMemcpyKind) -> None:
        if kind == cudaMemcpyKind.cudaMemcpyHostToDevice:
            self.check(dst, count)
        elif kind == cudaMemcpyKind.cudaMemcpyDeviceToHost:
            self.check(src, count)
        elif kind == cudaMemcpyKind.cudaMemcpyDeviceToDevice:
            self.check_inside(dst, count)
            self.check_inside(src, count)

    def cudaMemcpyAsync(
        self, dst: int, src: int, count: int, kind: cudaMemcpyKind, stream: Any
    ) -> tuple[cudaError_t]:
        if self.lost:
            return (LOST,)
        self._copy_checks(dst, src, count, kind)
        if self.capturing(stream):

            def replay() -> None:
                self._copy_checks(dst, src, count, kind)  # still allocated at launch time?
                ctypes.memmove(dst, src, count)

            self.record(stream, replay)
            return (OK,)
        ctypes.memmove(dst, src, count)
        return (OK,)

    def cudaMemsetAsync(self, dst: int, value: int, count: int, stream: Any) -> tuple[cudaError_t]:
        if self.lost:
            return (LOST,)
        self.check_inside(dst, count)
        if self.capturing(stream):

            def replay() -> None:
                self.check_inside(dst, count)
                ctypes.memset(dst, value, count)

            self.record(stream, replay)
            return (OK,)
        ctypes.memset(dst, value, count)
        return (OK,)

    def check_inside(self, ptr: int, nbytes: int) -> None:
        """``ptr`` may point into an allocation (CUDA pointer arithmetic), not only at it."""
        for base, buf in self.allocs.items():
            if base <= ptr and ptr + nbytes <= base + buf.nbytes:
                return
        raise AssertionError(f"{ptr:#x}+{nbytes} is outside every device allocation")

    def device_array(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
        """A numpy view of device memory (for the fake TensorRT)."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        self.check(ptr, nbytes)
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr)
        return np.frombuffer(raw, dtype=dt, count=int(np.prod(shape, dtype=np.int64))).reshape(
            shape
        )
