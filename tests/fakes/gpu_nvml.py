"""A fake of the ``pynvml`` module (nvidia-ml-py) for the GPU watchdog and backend selection.

State is plain attributes a test changes: PCIe ``gen``/``width``, the
``replays`` counter, ``temperature``, ``utilization``, ``clock_reasons``;
``lost`` (an NVML error code) makes every device query fail with it;
``inject_xid(n)`` delivers an Xid critical-error event to ``nvmlEventSetWait``.
"""

from __future__ import annotations

import queue
import threading
from types import SimpleNamespace
from typing import Any

_NAMES = {
    3: "Not Supported",
    10: "Timeout",
    15: "GPU is lost",
    16: "GPU requires reset",
    28: "GPU not found",
    999: "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _NAMES.get(self.value, f"NVML error {self.value}")


class FakeNvml:
    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_RESET_REQUIRED = 16
    NVML_ERROR_GPU_NOT_FOUND = 28
    NVML_ERROR_UNKNOWN = 999
    NVML_TEMPERATURE_GPU = 0
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices
        self.gen = 5
        self.width = 16
        self.replays = 0
        self.temperature = 45
        self.utilization = 30
        self.clock_reasons = 0
        self.lost: int | None = None
        self.xid_supported = True
        self.temperature_supported = True
        self.calls = 0
        self.event_sets_freed = 0
        self._events: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()

    def _query(self, value: Any) -> Any:
        with self._lock:
            self.calls += 1
        if self.lost is not None:
            raise NVMLError(self.lost)
        return value

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return int(self._query(self.devices))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if index >= self.devices:
            raise NVMLError(2)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._query(self.gen))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._query(self.width))

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return int(self._query(self.replays))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if not self.temperature_supported:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return int(self._query(self.temperature))

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return self._query(SimpleNamespace(gpu=self.utilization, memory=0))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return int(self._query(self.clock_reasons))

    def nvmlEventSetCreate(self) -> Any:
        return SimpleNamespace(kind="event-set")

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: Any) -> None:
        if not self.xid_supported:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        try:
            return self._events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(self.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self.event_sets_freed += 1

    def inject_xid(self, xid: int) -> None:
        self._events.put(
            SimpleNamespace(eventType=self.nvmlEventTypeXidCriticalError, eventData=xid)
        )
