"""A fake of cuda-python's runtime bindings (``cuda.bindings.runtime``).

Device memory is host memory: ``cudaMalloc`` hands out the address of a numpy
buffer, so copies are plain ``memmove``.  Every allocation is bounds-checked,
which catches a backend that under-allocates.  ``lost = True`` imitates a GPU
that fell off the bus: every call then fails with ``cudaErrorDevicesUnavailable``.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np


class cudaError_t(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorDevicesUnavailable = 46
    cudaErrorNoDevice = 100


class cudaMemcpyKind(enum.IntEnum):
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3


class cudaStream_t:
    def __init__(self, handle: int) -> None:
        self._handle = handle

    def __int__(self) -> int:
        return self._handle


OK = cudaError_t.cudaSuccess
LOST = cudaError_t.cudaErrorDevicesUnavailable


class FakeCudart:
    cudaError_t = cudaError_t
    cudaMemcpyKind = cudaMemcpyKind

    def __init__(self, name: str = "NVIDIA H200", capability: tuple[int, int] = (9, 0)) -> None:
        self.name = name
        self.capability = capability
        self.devices = 1
        self.lost = False
        self.allocs: dict[int, np.ndarray[Any, Any]] = {}
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
        return (self._err(),)

    def cudaMalloc(self, size: int) -> tuple[cudaError_t, int]:
        if self.lost:
            return LOST, 0
        buf = np.zeros(size, dtype=np.uint8)
        ptr = int(buf.ctypes.data)
        self.allocs[ptr] = buf
        return OK, ptr

    def cudaFree(self, ptr: int) -> tuple[cudaError_t]:
        self.allocs.pop(int(ptr), None)
        return (OK,)

    def check(self, ptr: int, nbytes: int) -> None:
        buf = self.allocs.get(int(ptr))
        assert buf is not None, f"{ptr:#x} is not a device allocation"
        assert nbytes <= buf.nbytes, f"{nbytes} bytes into a {buf.nbytes}-byte allocation"

    def cudaMemcpyAsync(
        self, dst: int, src: int, count: int, kind: cudaMemcpyKind, stream: Any
    ) -> tuple[cudaError_t]:
        if self.lost:
            return (LOST,)
        if kind == cudaMemcpyKind.cudaMemcpyHostToDevice:
            self.check(dst, count)
        elif kind == cudaMemcpyKind.cudaMemcpyDeviceToHost:
            self.check(src, count)
        ctypes.memmove(dst, src, count)
        return (OK,)

    def device_array(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
        """A numpy view of device memory (for the fake TensorRT)."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        self.check(ptr, nbytes)
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr)
        return np.frombuffer(raw, dtype=dt, count=int(np.prod(shape, dtype=np.int64))).reshape(
            shape
        )
