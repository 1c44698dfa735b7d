"""NVML watchdog: notices within a poll when the GPU degrades or drops off the bus.

Two daemon threads, both on the NVML seam (:mod:`appliance.ops.nvml`, a module with
pynvml's names):

* the *poller* (every ``interval_s``, 500 ms by default) reads the PCIe link
  generation and width and compares them with the baseline taken at
  :meth:`GpuWatchdog.start`, the PCIe replay counter (DCGM's health rule:
  more than 8 replays within a minute is a warning), the temperature and the
  clock-event reasons (reported, never alarmed on).  Any NVML call failing with
  ``GPU_IS_LOST``, ``RESET_REQUIRED``, ``GPU_NOT_FOUND`` or ``UNKNOWN`` means
  the GPU is lost;
* the *event waiter* blocks in ``nvmlEventSetWait`` on Xid critical-error
  events: 79 (fallen off the bus), 38, 39, 42 and 119 raise an alarm.

An alarm goes to ``on_alarm`` once per new problem; every poll also goes to
``on_reading`` so the pool can tell how long the GPU has been healthy.

The seed's box lost its PCIe link in a UPS switch-over and quietly ran on the
CPU for three days; everything here logs at ERROR so that cannot happen again.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

log = logging.getLogger(__name__)

LOST_ERRORS = (
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_RESET_REQUIRED",
    "NVML_ERROR_GPU_NOT_FOUND",
    "NVML_ERROR_UNKNOWN",
)
"""NVML return codes that mean the device is gone, not that a query is unsupported."""

CRITICAL_XIDS: dict[int, str] = {
    79: "GPU has fallen off the bus",
    38: "Xid 38 (driver/PCIe error)",
    39: "Xid 39 (driver/PCIe error)",
    42: "Xid 42 (driver/PCIe error)",
    119: "Xid 119 (GSP timeout, fatal)",
}

REPLAY_LIMIT_PER_MINUTE = 8
"""DCGM's ``DCGM_LIMIT_MAX_PCIREPLAY_RATE``: replays per minute before its PCIe health warns."""

_EVENT_WAIT_MS = 500
"""How long one ``nvmlEventSetWait`` blocks, so that :meth:`GpuWatchdog.stop` is prompt."""


@dataclass(frozen=True)
class Alarm:
    kind: str
    """``link_degraded``, ``replay_rate``, ``gpu_lost`` or ``xid``."""
    reason: str
    time: float = field(default_factory=time.time)
    """Wall-clock time (seconds since the epoch)."""


@dataclass(frozen=True)
class Reading:
    """One poll.  ``problems`` is empty when the GPU looks healthy."""

    pcie_gen: int | None = None
    pcie_width: int | None = None
    replays_last_minute: int | None = None
    temperature_c: int | None = None
    clock_event_reasons: int | None = None
    problems: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.problems


class _Lost(Exception):
    """An NVML call said the device is gone."""


@dataclass(eq=False)
class GpuWatchdog:
    """Polls NVML and waits for Xid events; calls back on alarms and on every reading."""

    nvml: Any
    device_index: int
    interval_s: float
    on_alarm: Callable[[Alarm], None]
    _: KW_ONLY
    on_reading: Callable[[Reading], None] | None = None
    clock: Callable[[], float] = time.monotonic
    _lost_codes: set[int] = field(init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)
    _handle: Any = field(default=None, init=False)
    _event_set: Any = field(default=None, init=False)
    _replays: collections.deque[tuple[float, int]] = field(
        default_factory=collections.deque, init=False
    )
    _active: set[str] = field(default_factory=set, init=False)  # problems already alarmed on
    _unsupported: set[str] = field(default_factory=set, init=False)
    baseline: tuple[int, int] | None = field(default=None, init=False)
    """PCIe (generation, width) when the watchdog started."""
    last_reading: Reading | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        codes = (getattr(self.nvml, n) for n in LOST_ERRORS if hasattr(self.nvml, n))
        self._lost_codes = {int(c) for c in codes}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Take the baseline and start both threads."""
        nvml = self.nvml
        self._handle = nvml.nvmlDeviceGetHandleByIndex(self.device_index)
        gen = self._optional("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration, self._handle)
        width = self._optional("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth, self._handle)
        if gen is not None and width is not None:
            self.baseline = (int(gen), int(width))
        log.info(
            "GPU watchdog on device %d: PCIe baseline %s, poll every %.0f ms",
            self.device_index,
            f"gen {gen} x{width}" if self.baseline else "unavailable",
            self.interval_s * 1000,
        )
        self._threads = [threading.Thread(target=self._poll_loop, name="gpu-watchdog", daemon=True)]
        if self._register_xid_events():
            self._threads.append(
                threading.Thread(target=self._event_loop, name="gpu-xid-events", daemon=True)
            )
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        if self._event_set is not None:
            try:
                self.nvml.nvmlEventSetFree(self._event_set)
            except self.nvml.NVMLError as exc:
                log.debug("nvmlEventSetFree: %s", exc)
            self._event_set = None

    # ------------------------------------------------------------------ polling

    def poll_once(self) -> Reading:
        """Read everything once, raise alarms for new problems, and return the reading."""
        if self._handle is None:
            self._handle = self.nvml.nvmlDeviceGetHandleByIndex(self.device_index)
        try:
            reading = self._read()
        except _Lost as exc:
            reading = Reading(problems=(f"gpu_lost: {exc}",))
        self.last_reading = reading
        self._raise_alarms(reading)
        if self.on_reading is not None:
            self.on_reading(reading)
        return reading

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # a bug here must not kill the watchdog silently
                log.exception("GPU watchdog poll failed")
            self._stop.wait(self.interval_s)

    def _read(self) -> Reading:
        nvml, h = self.nvml, self._handle
        problems: list[str] = []
        gen = self._optional("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration, h)
        width = self._optional("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth, h)
        if self.baseline is not None and width is not None and width < self.baseline[1]:
            problems.append(f"link_degraded: PCIe width x{width}, was x{self.baseline[1]}")
        if self.baseline is not None and gen is not None and gen < self.baseline[0]:
            # GPUs lower the link speed when idle to save power; only a busy GPU on a
            # slower link is a degraded link.
            util = self._optional("utilization", nvml.nvmlDeviceGetUtilizationRates, h)
            if util is not None and int(util.gpu) > 0:
                problems.append(
                    f"link_degraded: PCIe gen {gen} while busy, was gen {self.baseline[0]}"
                )
        replays = self._replay_rate(
            self._optional("replays", nvml.nvmlDeviceGetPcieReplayCounter, h)
        )
        if replays is not None and replays > REPLAY_LIMIT_PER_MINUTE:
            problems.append(
                f"replay_rate: {replays} PCIe replays in the last minute "
                f"(limit {REPLAY_LIMIT_PER_MINUTE})"
            )
        temp = self._optional(
            "temperature",
            nvml.nvmlDeviceGetTemperature,
            h,
            getattr(nvml, "NVML_TEMPERATURE_GPU", 0),
        )
        reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        reasons = self._optional("clock_events", reasons_fn, h) if reasons_fn else None
        return Reading(
            pcie_gen=None if gen is None else int(gen),
            pcie_width=None if width is None else int(width),
            replays_last_minute=replays,
            temperature_c=None if temp is None else int(temp),
            clock_event_reasons=None if reasons is None else int(reasons),
            problems=tuple(problems),
        )

    def _optional(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; None when unsupported, :class:`_Lost` when the device is gone."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if int(getattr(exc, "value", -1)) in self._lost_codes:
                raise _Lost(str(exc) or f"NVML error {exc.value}") from exc
            if what not in self._unsupported:
                self._unsupported.add(what)
                log.info("GPU watchdog: %s not available (%s); not watched", what, exc)
            return None

    def _replay_rate(self, counter: Any) -> int | None:
        """Replays within the last 60 s (or since start, when that is shorter)."""
        if counter is None:
            return None
        now = self.clock()
        self._replays.append((now, int(counter)))
        while len(self._replays) > 1 and now - self._replays[1][0] >= 60.0:
            self._replays.popleft()
        return int(counter) - self._replays[0][1]

    def _raise_alarms(self, reading: Reading) -> None:
        kinds = {p.split(":", 1)[0]: p for p in reading.problems}
        for kind, problem in kinds.items():
            if kind in self._active:
                continue
            self._active.add(kind)
            self._alarm(Alarm(kind=kind, reason=problem.split(": ", 1)[-1]))
        for kind in list(self._active):
            if kind not in kinds:
                self._active.discard(kind)
                log.warning("GPU watchdog: %s cleared", kind)

    def _alarm(self, alarm: Alarm) -> None:
        log.error("GPU WATCHDOG ALARM %s: %s", alarm.kind, alarm.reason)
        try:
            self.on_alarm(alarm)
        except Exception:  # the failover must not take the watchdog down with it
            log.exception("GPU watchdog alarm handler failed")

    # ------------------------------------------------------------------ Xid events

    def _register_xid_events(self) -> bool:
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(
                self._handle, nvml.nvmlEventTypeXidCriticalError, event_set
            )
        except nvml.NVMLError as exc:
            log.info("GPU watchdog: Xid events not available (%s); polling only", exc)
            return False
        self._event_set = event_set
        return True

    def _event_loop(self) -> None:
        nvml = self.nvml
        timeout_code = int(getattr(nvml, "NVML_ERROR_TIMEOUT", 10))
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait(self._event_set, _EVENT_WAIT_MS)
            except nvml.NVMLError as exc:
                if int(getattr(exc, "value", -1)) == timeout_code:
                    continue
                if int(getattr(exc, "value", -1)) in self._lost_codes:
                    self._alarm(Alarm(kind="gpu_lost", reason=f"event wait: {exc}"))
                    return
                log.warning("GPU watchdog: nvmlEventSetWait failed (%s); Xid events off", exc)
                return
            self.handle_event(data)

    def handle_event(self, data: Any) -> None:
        """One NVML event: alarm on the critical Xids, log the others."""
        if not int(data.eventType) & int(self.nvml.nvmlEventTypeXidCriticalError):
            return
        xid = int(data.eventData)
        if xid in CRITICAL_XIDS:
            self._alarm(Alarm(kind="xid", reason=CRITICAL_XIDS[xid]))
        else:
            log.warning("GPU reported Xid %d (not one that moves work off the GPU)", xid)
