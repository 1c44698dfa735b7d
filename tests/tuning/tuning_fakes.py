"""Fake hardware for the tuning tests: a sysfs/procfs tree and an NVML.

The tree: two NUMA nodes, CPUs 0-7 (node 0 = 0-3, node 1 = 4-7), one GPU at
0000:3b:00.0 on node 1 with MSI IRQs 40-43.  The fake NVML keeps the GPU's
state in a JSON file inside the tree, so a GPU "remembers" locked clocks
across processes the way a real one does (needed by the crash test).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tuning.sysfs import SysRoot

NVML_BUS_ID = "00000000:3B:00.0"
BDF = "0000:3b:00.0"
IRQS = (40, 41, 42, 43)
MANAGED_IRQ = 43
GRAPHICS_CLOCKS = [1980, 1755, 1410, 1005, 345]
MEMORY_CLOCKS = [3201, 1593]

# run_cli fixture: (*args, is_root=, gpu=, faults=) -> (exit code, stdout)
RunCli = Callable[..., tuple[int, str]]


def _put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_tree(
    root: Path,
    *,
    nodes: dict[int, str] | None = None,
    online: str = "0-7",
    gpu_node: int = 1,
    governor: str = "powersave",
    cpufreq: bool = True,
    processes: tuple[str, ...] = ("systemd", "sshd"),
) -> Path:
    nodes = nodes if nodes is not None else {0: "0-3", 1: "4-7"}
    _put(root, "sys/devices/system/cpu/online", f"{online}\n")
    cpus = sorted({int(c) for n in nodes.values() for c in _expand(n)})
    for cpu in cpus:
        base = f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        if not cpufreq:
            (root / f"sys/devices/system/cpu/cpu{cpu}").mkdir(parents=True, exist_ok=True)
            continue
        _put(root, f"{base}/scaling_governor", f"{governor}\n")
        _put(root, f"{base}/scaling_available_governors", "performance powersave\n")
        _put(root, f"{base}/energy_performance_preference", "balance_performance\n")
        _put(
            root,
            f"{base}/energy_performance_available_preferences",
            "default performance balance_performance balance_power power \n",
        )
    for node, cpulist in nodes.items():
        _put(root, f"sys/devices/system/node/node{node}/cpulist", f"{cpulist}\n")
    dev = f"sys/bus/pci/devices/{BDF}"
    _put(root, f"{dev}/numa_node", f"{gpu_node}\n")
    _put(root, f"{dev}/local_cpulist", f"{nodes[gpu_node]}\n")
    _put(root, f"{dev}/irq", f"{IRQS[0]}\n")
    _put(root, f"{dev}/current_link_speed", "16.0 GT/s PCIe\n")
    _put(root, f"{dev}/max_link_speed", "32.0 GT/s PCIe\n")
    _put(root, f"{dev}/current_link_width", "16\n")
    _put(root, f"{dev}/max_link_width", "16\n")
    for irq in IRQS:
        _put(root, f"{dev}/msi_irqs/{irq}", "msix\n")
        _put(root, f"proc/irq/{irq}/smp_affinity_list", f"{online}\n")
    for pid, comm in enumerate(processes, start=1):
        _put(root, f"proc/{pid}/comm", f"{comm[:15]}\n")
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    return root


def _expand(cpulist: str) -> list[int]:
    out: list[int] = []
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the system part of the tree (the state file lives under run/)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not str(p.relative_to(root)).startswith("run/")
    }


class FaultyRoot(SysRoot):
    """A tree whose writes to some paths fail with an errno (EIO = kernel-managed IRQ)."""

    def __init__(self, root: str, faults: dict[str, int] | None = None) -> None:
        super().__init__(root)
        self.faults = faults if faults is not None else managed_irq_fault()
        self.writes: list[tuple[str, str]] = []

    def write(self, rel: str, value: str) -> None:
        code = self.faults.get(rel)
        if code is not None:
            raise OSError(code, f"fake {errno.errorcode[code]}", str(self.path(rel)))
        self.writes.append((rel, value))
        super().write(rel, value)


def managed_irq_fault() -> dict[str, int]:
    return {f"/proc/irq/{MANAGED_IRQ}/smp_affinity_list": errno.EIO}


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """The pynvml names tuning uses, over a JSON file that is the GPU."""

    NVMLError = FakeNVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = 6
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def create(path: Path, *, fail: dict[str, int] | None = None) -> FakeNvml:
        state = {
            "bus_id": NVML_BUS_ID,
            "persistence": 0,
            "locked": None,
            "mem_locked": None,
            "idle_graphics": 345,
            "idle_memory": 1593,
            "pcie": [4, 5, 16, 16],
            "fail": fail or {},
        }
        path.write_text(json.dumps(state, sort_keys=True))
        return FakeNvml(path)

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def set_fail(self, fn: str, code: int | None) -> None:
        st = self.state()
        if code is None:
            st["fail"].pop(fn, None)
        else:
            st["fail"][fn] = code
        self._save(st)

    def _save(self, st: dict[str, Any]) -> None:
        self.path.write_text(json.dumps(st, sort_keys=True))

    def _enter(self, fn: str, handle: Any = None) -> dict[str, Any]:
        st = self.state()
        if fn in st["fail"]:
            raise FakeNVMLError(st["fail"][fn])
        if handle is not None and handle != ("gpu", 0):
            raise FakeNVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return st

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        if index != 0:
            raise FakeNVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return ("gpu", 0)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: bytes | str) -> Any:
        st = self._enter("nvmlDeviceGetHandleByPciBusId")
        text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
        if text.upper() != st["bus_id"].upper():
            raise FakeNVMLError(self.NVML_ERROR_NOT_FOUND)
        return ("gpu", 0)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        st = self._enter("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=st["bus_id"].encode())

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName", handle)
        return "NVIDIA H200"

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return int(self._enter("nvmlDeviceGetPersistenceMode", handle)["persistence"])

    def nvmlDeviceSetPersistenceMode(self, handle: Any, mode: int) -> None:
        st = self._enter("nvmlDeviceSetPersistenceMode", handle)
        st["persistence"] = int(mode)
        self._save(st)

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetSupportedMemoryClocks", handle)
        return list(MEMORY_CLOCKS)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Any, mem_mhz: int) -> list[int]:
        self._enter("nvmlDeviceGetSupportedGraphicsClocks", handle)
        if mem_mhz not in MEMORY_CLOCKS:
            raise FakeNVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return list(GRAPHICS_CLOCKS)

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        st = self._enter("nvmlDeviceGetClockInfo", handle)
        if clock_type == self.NVML_CLOCK_MEM:
            return int(st["mem_locked"] or st["idle_memory"])
        return int(st["locked"] or st["idle_graphics"])

    def _lock(self, fn: str, field: str, handle: Any, lo: int, hi: int, ok: list[int]) -> None:
        st = self._enter(fn, handle)
        if lo != hi or lo not in ok:
            raise FakeNVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        st[field] = lo
        self._save(st)

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, lo: int, hi: int) -> None:
        self._lock("nvmlDeviceSetGpuLockedClocks", "locked", handle, lo, hi, GRAPHICS_CLOCKS)

    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None:
        st = self._enter("nvmlDeviceResetGpuLockedClocks", handle)
        st["locked"] = None
        self._save(st)

    def nvmlDeviceSetMemoryLockedClocks(self, handle: Any, lo: int, hi: int) -> None:
        self._lock("nvmlDeviceSetMemoryLockedClocks", "mem_locked", handle, lo, hi, MEMORY_CLOCKS)

    def nvmlDeviceResetMemoryLockedClocks(self, handle: Any) -> None:
        st = self._enter("nvmlDeviceResetMemoryLockedClocks", handle)
        st["mem_locked"] = None
        self._save(st)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._enter("nvmlDeviceGetCurrPcieLinkGeneration", handle)["pcie"][0])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle)["pcie"][1])

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._enter("nvmlDeviceGetCurrPcieLinkWidth", handle)["pcie"][2])

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle)["pcie"][3])
