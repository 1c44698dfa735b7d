"""The GPU through NVML: finding it in sysfs, its settings and its PCIe link.

NVML is reached only through the object ``appliance.ops.nvml.load()`` returns (the
``pynvml`` module in production, a fake in tests).  The deprecated
applications-clocks calls are not used: clocks are locked with
``nvmlDeviceSetGpuLockedClocks`` and released with ``...ResetGpuLockedClocks``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tuning.setting import (
    Host,
    NotPlanned,
    Setting,
    SettingError,
    SettingGone,
    SettingUnsupported,
)
from tuning.sysfs import SysRoot, format_cpulist, online_cpus, parse_cpulist


class GpuUnavailable(Exception):
    """No usable GPU; the message says why (shown as "not applicable")."""


def nvml_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    """The NVMLError class of this NVML object, for ``except`` clauses."""
    err = getattr(nvml, "NVMLError", None)
    if isinstance(err, type) and issubclass(err, BaseException):
        return (err,)
    return ()


def nvml_code(nvml: Any, exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def is_not_supported(nvml: Any, exc: BaseException) -> bool:
    return nvml_code(nvml, exc) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)


def sysfs_bdf(nvml_bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` → sysfs's ``0000:3b:00.0`` (the kernel prints %04x)."""
    domain, _, rest = nvml_bus_id.strip().partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _text(value: Any) -> str:
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    bus_id: str
    """As NVML spells it (8-digit domain)."""
    bdf: str
    """As sysfs spells it (4-digit domain)."""
    numa_node: int | None
    """None when the platform reports no node (``numa_node`` is -1)."""
    cpus: frozenset[int]
    """Online CPUs of that node (of ``local_cpulist`` when there is no node)."""

    @property
    def sysfs_dir(self) -> str:
        return f"/sys/bus/pci/devices/{self.bdf}"

    def describe(self) -> str:
        node = f"NUMA node {self.numa_node}" if self.numa_node is not None else "no NUMA node"
        return (
            f"GPU {self.index} {self.name} at {self.bdf}, {node}, CPUs {format_cpulist(self.cpus)}"
        )


def find_gpu(fs: SysRoot, nvml: Any | None, index: int) -> GpuInfo:
    """Locate GPU ``index`` through NVML and its NUMA node through sysfs."""
    if nvml is None:
        raise GpuUnavailable("no NVIDIA GPU (NVML not available)")
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        try:
            name = _text(nvml.nvmlDeviceGetName(handle))
        except nvml_errors(nvml):
            name = "GPU"
    except nvml_errors(nvml) as exc:
        raise GpuUnavailable(f"GPU {index} not found through NVML: {exc}") from exc
    bdf = sysfs_bdf(bus_id)
    dev = f"/sys/bus/pci/devices/{bdf}"
    if not fs.exists(dev):
        raise GpuUnavailable(f"GPU {index} ({bdf}) has no {dev}")
    node: int | None = None
    try:
        node = int(fs.read_value(f"{dev}/numa_node"))
        node = None if node < 0 else node
        if node is not None:
            cpus = parse_cpulist(fs.read(f"/sys/devices/system/node/node{node}/cpulist"))
        else:
            cpus = parse_cpulist(fs.read(f"{dev}/local_cpulist"))
        cpus &= online_cpus(fs)
    except (OSError, ValueError) as exc:
        raise GpuUnavailable(f"cannot read the NUMA node of {bdf}: {exc}") from exc
    return GpuInfo(index=index, name=name, bus_id=bus_id, bdf=bdf, numa_node=node, cpus=cpus)


def gpu_irqs(fs: SysRoot, gpu: GpuInfo) -> list[int]:
    """The GPU's MSI/MSI-X IRQs; the legacy ``irq`` line when MSI is off."""
    msi = f"{gpu.sysfs_dir}/msi_irqs"
    if fs.exists(msi):
        irqs = sorted(int(n) for n in fs.listdir(msi) if n.isdigit())
        if irqs:
            return irqs
    try:
        irq = int(fs.read_value(f"{gpu.sysfs_dir}/irq"))
    except (OSError, ValueError):
        return []
    return [irq] if irq > 0 else []


_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
"""NVML's spelling of a PCI address (``00000000:3B:00.0``)."""


class _GpuSetting(Setting):
    def __init__(self, host: Host, *, name: str, target: str, reason: str, bus_id: str) -> None:
        super().__init__(host, name=name, target=target, reason=reason)
        self.bus_id = bus_id

    def params(self) -> dict[str, Any]:
        return {**super().params(), "bus_id": self.bus_id}

    def check_planned(self, original: str) -> None:
        super().check_planned(original)
        if not isinstance(self.bus_id, str) or not _BUS_ID.fullmatch(self.bus_id):
            raise NotPlanned(f"{self.target}: bus id {self.bus_id!r:.60} is not a PCI address")

    def _call(self, what: str, fn: str, *args: Any) -> Any:
        """Call NVML function ``fn`` on this GPU, turning NVMLError into SettingError."""
        nvml = self.host.nvml
        if nvml is None:
            raise SettingError(f"{self.name} {self.target}: NVML not available, cannot {what}")
        try:
            # bytes: older pynvml passes the argument straight to a c_char_p.
            handle = nvml.nvmlDeviceGetHandleByPciBusId(self.bus_id.encode("ascii"))
        except nvml_errors(nvml) as exc:
            raise SettingGone(f"{self.name} {self.target}: GPU {self.bus_id} gone: {exc}") from exc
        try:
            return getattr(nvml, fn)(handle, *args)
        except nvml_errors(nvml) as exc:
            msg = f"{self.name} {self.target}: cannot {what}: {exc}"
            if is_not_supported(nvml, exc):
                raise SettingUnsupported(msg) from exc
            raise SettingError(msg) from exc


class GpuPersistence(_GpuSetting):
    kind = "gpu-persistence"

    def read(self) -> str:
        return str(int(self._call("read persistence mode", "nvmlDeviceGetPersistenceMode")))

    def desired(self) -> str:
        return "1"

    def matches(self, value: str) -> bool:
        return value == "1"

    def apply(self) -> None:
        self._call("enable persistence mode", "nvmlDeviceSetPersistenceMode", 1)

    def revert(self, original: str) -> None:
        self._call("restore persistence mode", "nvmlDeviceSetPersistenceMode", int(original))

    def check_planned(self, original: str) -> None:
        super().check_planned(original)
        if original not in ("0", "1"):
            raise NotPlanned(f"{self.target}: persistence mode {original!r:.60} is not 0 or 1")

    def show(self, value: str) -> str:
        return "on" if value == "1" else "off"


class GpuLockedClocks(_GpuSetting):
    """Graphics (or memory) clock locked at one frequency; reverted by a reset.

    NVML has no call that reads the lock back, so the original is recorded as
    "unlocked" and revert resets, which is what the driver does at boot.
    Verification compares the clock the GPU runs at with the lock.
    """

    kind = "gpu-locked-clocks"
    clock_type_name = "NVML_CLOCK_GRAPHICS"
    lock_fn = "nvmlDeviceSetGpuLockedClocks"
    reset_fn = "nvmlDeviceResetGpuLockedClocks"

    def __init__(
        self, host: Host, *, name: str, target: str, reason: str, bus_id: str, mhz: int
    ) -> None:
        super().__init__(host, name=name, target=target, reason=reason, bus_id=bus_id)
        self.mhz = mhz

    def params(self) -> dict[str, Any]:
        return {**super().params(), "mhz": self.mhz}

    def check_planned(self, original: str) -> None:
        super().check_planned(original)
        mhz: Any = self.mhz  # from the file: not necessarily an int
        if isinstance(mhz, bool) or not isinstance(mhz, int) or not 1 <= mhz <= 100_000:
            raise NotPlanned(f"{self.target}: clock {mhz!r:.60} is not a clock in MHz")

    def read(self) -> str:
        clock_type = getattr(self.host.nvml, self.clock_type_name, 0)
        return str(int(self._call("read the clock", "nvmlDeviceGetClockInfo", clock_type)))

    def desired(self) -> str:
        return str(self.mhz)

    def matches(self, value: str) -> bool:
        return value == str(self.mhz)

    def already_set(self) -> bool:
        return False  # a clock that happens to be at the target is not a lock

    def apply(self) -> None:
        self._call(f"lock clocks at {self.mhz} MHz", self.lock_fn, self.mhz, self.mhz)

    def revert(self, original: str) -> None:
        self._call("reset locked clocks", self.reset_fn)

    def show(self, value: str) -> str:
        return f"{value} MHz"


class GpuMemoryLockedClocks(GpuLockedClocks):
    kind = "gpu-memory-locked-clocks"
    clock_type_name = "NVML_CLOCK_MEM"
    lock_fn = "nvmlDeviceSetMemoryLockedClocks"
    reset_fn = "nvmlDeviceResetMemoryLockedClocks"


def supported_clocks(nvml: Any, gpu: GpuInfo) -> tuple[list[int], list[int]]:
    """(memory clocks, graphics clocks at the highest memory clock), each highest first."""
    handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
    mem = sorted((int(c) for c in nvml.nvmlDeviceGetSupportedMemoryClocks(handle)), reverse=True)
    if not mem:
        return [], []
    gfx = nvml.nvmlDeviceGetSupportedGraphicsClocks(handle, mem[0])
    return mem, sorted((int(c) for c in gfx), reverse=True)


def pick_clock(supported: list[int], wanted: int | None) -> int:
    """The configured clock rounded down to a supported one; the highest when unset."""
    if wanted is None:
        return max(supported)
    fitting = [c for c in supported if c <= wanted]
    return max(fitting) if fitting else min(supported)


_GT_PER_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass(frozen=True)
class PcieLink:
    gen: int
    max_gen: int
    width: int
    max_width: int
    source: str

    @property
    def degraded(self) -> bool:
        return self.gen < self.max_gen or self.width < self.max_width

    def describe(self) -> str:
        return f"Gen{self.gen} x{self.width}"

    def describe_max(self) -> str:
        return f"Gen{self.max_gen} x{self.max_width}"


def _gen_from_speed(text: str) -> int:
    """``"16.0 GT/s PCIe"`` → 4."""
    return _GT_PER_GEN[float(text.split()[0])]


def pcie_link(fs: SysRoot, nvml: Any, gpu: GpuInfo) -> PcieLink:
    """The link as NVML reports it, sysfs when NVML cannot.  Never writes PCI config space."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
        return PcieLink(
            gen=int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            max_gen=int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            width=int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            max_width=int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
            source="NVML",
        )
    except nvml_errors(nvml):
        pass
    d = gpu.sysfs_dir
    try:
        return PcieLink(
            gen=_gen_from_speed(fs.read_value(f"{d}/current_link_speed")),
            max_gen=_gen_from_speed(fs.read_value(f"{d}/max_link_speed")),
            width=int(fs.read_value(f"{d}/current_link_width")),
            max_width=int(fs.read_value(f"{d}/max_link_width")),
            source="sysfs",
        )
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise GpuUnavailable(f"PCIe link of {gpu.bdf} unreadable: {exc}") from exc
