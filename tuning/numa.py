"""The daemon binds itself to its GPU's NUMA node.

Scheduler affinity and the memory policy are per thread, and a new thread
inherits both from the thread that creates it.  So ``ttsd serve`` calls
:func:`bind_self` first thing, before any thread pool exists, and every worker
it starts later runs on the GPU's node and allocates from the node's memory.
Threads that already exist get the CPU affinity too; the kernel offers no way
to set another thread's memory policy, which is one more reason to call early.

``set_mempolicy`` is not in glibc (it lives in libnuma), so it is called
through ``syscall(2)`` with ctypes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
from dataclasses import dataclass
from typing import Any

from appliance.ops.config import TuningConfig
from tuning.gpu import GpuInfo, GpuUnavailable, find_gpu
from tuning.sysfs import SysRoot, format_cpulist

log = logging.getLogger(__name__)

MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
_MODES = {"preferred": MPOL_PREFERRED, "bind": MPOL_BIND}

# (set_mempolicy, get_mempolicy) syscall numbers.
_SYSCALLS = {"x86_64": (238, 239), "aarch64": (237, 236)}

_MASK_WORDS = 16  # 1024 nodes
_MaskType = ctypes.c_ulong * _MASK_WORDS
# The kernel reads maxnode - 1 bits (a historical off-by-one that libnuma also pays).
_MAXNODE = _MASK_WORDS * 8 * ctypes.sizeof(ctypes.c_ulong) + 1


def _syscall_numbers() -> tuple[int, int]:
    try:
        return _SYSCALLS[platform.machine()]
    except KeyError:
        raise OSError(f"set_mempolicy: unknown syscall number on {platform.machine()}") from None


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def set_mempolicy(mode: int, nodes: frozenset[int]) -> None:
    """Memory policy of the calling thread (and of threads it creates later)."""
    mask = _MaskType()
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    for node in nodes:
        mask[node // bits] |= 1 << (node % bits)
    nr_set, _ = _syscall_numbers()
    # syscall(2) is variadic and reads longs: pass longs, not ctypes' default int.
    L = ctypes.c_long
    if _libc().syscall(L(nr_set), L(mode), ctypes.byref(mask), L(_MAXNODE)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def get_mempolicy() -> tuple[int, frozenset[int]]:
    """(mode, nodes) of the calling thread."""
    mode = ctypes.c_int()
    mask = _MaskType()
    _, nr_get = _syscall_numbers()
    L = ctypes.c_long
    args = (ctypes.byref(mode), ctypes.byref(mask), L(_MAXNODE), None, L(0))
    if _libc().syscall(L(nr_get), *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    nodes = frozenset(
        w * bits + b for w in range(_MASK_WORDS) for b in range(bits) if mask[w] >> b & 1
    )
    return mode.value, nodes


@dataclass(frozen=True)
class BindResult:
    applied: bool
    cpus: frozenset[int] = frozenset()
    node: int | None = None
    mempolicy: str = "none"
    reason: str = ""

    def describe(self) -> str:
        if not self.applied:
            return f"NUMA binding not applicable: {self.reason}"
        where = f"node {self.node}" if self.node is not None else "the GPU's local CPUs"
        return f"bound to {where}: CPUs {format_cpulist(self.cpus)}, memory policy {self.mempolicy}"


def planned_binding(cfg: TuningConfig, gpu: GpuInfo) -> str:
    """What :func:`bind_self` would do, for ``tune plan``."""
    text = f"CPUs {format_cpulist(gpu.cpus)}"
    if gpu.numa_node is not None and cfg.numa_mempolicy != "none":
        text += f", memory {cfg.numa_mempolicy} node {gpu.numa_node}"
    return text


def bind_self(cfg: TuningConfig, nvml: Any | None) -> BindResult:
    """Bind this process to the GPU's NUMA node; never raises (a box without a GPU is fine)."""
    fs = SysRoot(cfg.root)
    try:
        gpu = find_gpu(fs, nvml, cfg.gpu_index)
    except GpuUnavailable as exc:
        result = BindResult(applied=False, reason=str(exc))
        log.info("%s", result.describe())
        return result
    try:
        allowed = frozenset(os.sched_getaffinity(0))
        cpus = gpu.cpus & allowed
        if not cpus:
            result = BindResult(
                applied=False,
                reason=f"none of the GPU's CPUs ({format_cpulist(gpu.cpus)}) is allowed "
                f"to this process ({format_cpulist(allowed)})",
            )
            log.warning("%s", result.describe())
            return result
        os.sched_setaffinity(0, cpus)
        _bind_existing_threads(cpus)
    except OSError as exc:
        result = BindResult(applied=False, reason=f"sched_setaffinity failed: {exc}")
        log.warning("%s", result.describe())
        return result
    policy = _set_policy(cfg, gpu)
    result = BindResult(applied=True, cpus=cpus, node=gpu.numa_node, mempolicy=policy)
    log.info("%s", result.describe())
    return result


def _bind_existing_threads(cpus: frozenset[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:
            continue  # the thread ended meanwhile


def _set_policy(cfg: TuningConfig, gpu: GpuInfo) -> str:
    if cfg.numa_mempolicy == "none":
        return "none (tuning.numa_mempolicy)"
    if gpu.numa_node is None:
        return "none (the platform reports no NUMA node for the GPU)"
    try:
        set_mempolicy(_MODES[cfg.numa_mempolicy], frozenset({gpu.numa_node}))
    except OSError as exc:
        return f"not set ({exc.strerror or exc})"
    return f"{cfg.numa_mempolicy} node {gpu.numa_node}"
