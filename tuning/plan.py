"""The plan: every setting the config asks for, its current and desired value, and why.

``build_plan`` only reads.  Each row is a :class:`PlanItem`; rows that can be
applied carry their :class:`~tuning.setting.Setting`.  Rows without one are
checks (PCIe link, NUMA binding, conflicting daemons) or settings that do not
apply on this system, with the reason in the note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.ops.config import TuningConfig
from tuning import services
from tuning.gpu import (
    GpuInfo,
    GpuLockedClocks,
    GpuMemoryLockedClocks,
    GpuPersistence,
    GpuUnavailable,
    find_gpu,
    gpu_irqs,
    is_not_supported,
    nvml_errors,
    pcie_link,
    pick_clock,
    supported_clocks,
)
from tuning.numa import planned_binding
from tuning.setting import (
    Host,
    IrqAffinity,
    Setting,
    SettingError,
    SettingUnsupported,
    SysfsAttribute,
)
from tuning.sysfs import format_cpulist, online_cpus

SCHEMA = "ttsd.tune.plan/1"

# Actions of a row.
CHANGE = "change"  # apply will set it
NONE = "none"  # already at the desired value
SKIP = "skip"  # could be set, but will not be (conflict, unreadable, managed IRQ)
NOT_APPLICABLE = "not-applicable"
OK = "ok"  # a check that passed
WARN = "warn"  # a check that did not
INFO = "info"

# The daemons that manage these settings themselves and would fight us.
_CPU_OWNERS = (services.TUNED, services.POWER_PROFILES)
_IRQ_OWNERS = (services.TUNED,)


@dataclass(frozen=True)
class Environment:
    """The system as the planner sees it."""

    host: Host
    is_root: bool
    running: frozenset[str]
    """Tuning daemons that have a process (see :mod:`tuning.services`)."""


@dataclass
class PlanItem:
    setting: str
    target: str
    current: str
    desired: str
    needs_root: bool
    action: str
    note: str = ""
    setting_obj: Setting | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> str | None:
        return self.setting_obj.key if self.setting_obj is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "setting": self.setting,
            "target": self.target,
            "current": self.current,
            "desired": self.desired,
            "needs_root": self.needs_root,
            "action": self.action,
            "note": self.note,
        }


@dataclass
class Plan:
    root: str
    is_root: bool
    gpu: GpuInfo | None
    gpu_note: str
    running: frozenset[str]
    items: list[PlanItem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def changes(self) -> list[Setting]:
        return [i.setting_obj for i in self.items if i.action == CHANGE and i.setting_obj]

    def settings(self) -> list[Setting]:
        """Settings in force (to change or already set): what verify checks."""
        return [i.setting_obj for i in self.items if i.action in (CHANGE, NONE) and i.setting_obj]

    def to_json(self) -> dict[str, Any]:
        gpu = None
        if self.gpu is not None:
            gpu = {
                "index": self.gpu.index,
                "name": self.gpu.name,
                "bus_id": self.gpu.bus_id,
                "bdf": self.gpu.bdf,
                "numa_node": self.gpu.numa_node,
                "cpus": format_cpulist(self.gpu.cpus),
            }
        return {
            "schema": SCHEMA,
            "root": self.root,
            "is_root": self.is_root,
            "gpu": gpu,
            "gpu_note": self.gpu_note,
            "running_services": sorted(self.running),
            "items": [i.to_json() for i in self.items],
            "warnings": list(self.warnings),
        }


def _na(setting: str, target: str, note: str, *, needs_root: bool = True) -> PlanItem:
    return PlanItem(setting, target, "-", "-", needs_root, NOT_APPLICABLE, note)


class _Builder:
    def __init__(
        self, cfg: TuningConfig, env: Environment, force: bool, skipped: Mapping[str, str]
    ) -> None:
        self.cfg = cfg
        self.env = env
        self.fs = env.host.fs
        self.force = force
        self.skipped = skipped
        self.items: list[PlanItem] = []
        self.warnings: list[str] = []

    def setting(self, s: Setting, owners: tuple[str, ...] = (), note: str = "") -> None:
        """Add a row for ``s``: read it and decide the action."""
        try:
            current_raw = s.read()
        except SettingUnsupported as exc:
            self.items.append(_na(s.name, s.target, str(exc)))
            return
        except SettingError as exc:
            self.items.append(
                PlanItem(s.name, s.target, "?", s.show(s.desired()), True, SKIP, str(exc), s)
            )
            self.warnings.append(str(exc))
            return
        current, desired = s.show(current_raw), s.show(s.desired())
        active = sorted(set(owners) & self.env.running)
        notes = [note] if note else []
        if s.key in self.skipped:
            action = SKIP
            notes.insert(0, self.skipped[s.key])
        elif s.already_set():
            action = NONE
        elif active and not self.force:
            action = SKIP
            notes.insert(0, f"managed by {', '.join(active)} (running); --force overrides")
        else:
            action = CHANGE
            if active:
                notes.insert(0, f"overriding {', '.join(active)} (--force)")
        self.items.append(
            PlanItem(s.name, s.target, current, desired, s.needs_root, action, "; ".join(notes), s)
        )

    def cpus(self, gpu: GpuInfo | None, gpu_note: str) -> None:
        wanted = []
        if self.cfg.governor:
            wanted.append(("cpu governor", "scaling_governor", "scaling_available_governors"))
        if self.cfg.energy_performance_preference:
            wanted.append(
                (
                    "cpu energy preference",
                    "energy_performance_preference",
                    "energy_performance_available_preferences",
                )
            )
        if not wanted:
            return
        if self.cfg.cpus == "gpu-node":
            if gpu is None:
                for name, _, _ in wanted:
                    self.items.append(_na(name, "GPU node CPUs", gpu_note))
                return
            cpus = gpu.cpus
        else:
            cpus = online_cpus(self.fs)
        for name, attr, available in wanted:
            for cpu in sorted(cpus):
                self._cpufreq(name, cpu, attr, available)

    def _cpufreq(self, name: str, cpu: int, attr: str, available: str) -> None:
        base = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq"
        target = f"cpu{cpu}"
        if not self.fs.exists(base):
            self.items.append(_na(name, target, "no cpufreq interface (no driver, or a VM)"))
            return
        try:
            offered = self.fs.read_value(f"{base}/{available}").split()
        except OSError:
            self.items.append(_na(name, target, f"driver does not offer {available}"))
            return
        if "performance" not in offered:
            self.items.append(_na(name, target, f"driver offers only: {' '.join(offered)}"))
            return
        reason = (
            "no ramp-up delay when a request arrives"
            if attr == "scaling_governor"
            else "the hardware favours speed over energy"
        )
        s = SysfsAttribute(
            self.env.host,
            name=name,
            target=target,
            reason=reason,
            path=f"{base}/{attr}",
            value="performance",
        )
        self.setting(s, _CPU_OWNERS)

    def irqs(self, gpu: GpuInfo | None, gpu_note: str) -> None:
        if not self.cfg.irq_affinity:
            return
        if gpu is None:
            self.items.append(_na("irq affinity", "GPU IRQs", gpu_note))
            return
        irqs = gpu_irqs(self.fs, gpu)
        if not irqs:
            self.items.append(_na("irq affinity", gpu.bdf, "the GPU has no IRQs in sysfs"))
            return
        if not gpu.cpus:
            self.items.append(_na("irq affinity", gpu.bdf, "the GPU's node has no online CPU"))
            return
        cpulist = format_cpulist(gpu.cpus)
        note = ""
        if services.IRQBALANCE in self.env.running:
            note = "irqbalance will move it back (see warning)"
            bans = " ".join(f"--banirq={n}" for n in irqs)
            self.warnings.append(
                "irqbalance is running and rewrites IRQ affinity every 10 s, undoing this. "
                f'Remedy: make it leave the GPU\'s IRQs alone with IRQBALANCE_ARGS="{bans}" '
                "in /etc/default/irqbalance (Debian) or /etc/sysconfig/irqbalance (RHEL), "
                f"and keep other devices' IRQs off the GPU's CPUs with "
                f"IRQBALANCE_BANNED_CPULIST={cpulist}; then restart irqbalance."
            )
        for irq in irqs:
            path = f"/proc/irq/{irq}/smp_affinity_list"
            if not self.fs.exists(path):
                self.items.append(_na("irq affinity", f"irq{irq}", f"{path} missing"))
                continue
            s = IrqAffinity(
                self.env.host,
                name="irq affinity",
                target=f"irq{irq}",
                reason="GPU interrupts served next to the GPU's memory and threads",
                path=path,
                value=cpulist,
            )
            self.setting(s, _IRQ_OWNERS, note)

    def gpu_settings(self, gpu: GpuInfo | None, gpu_note: str) -> None:
        names = []
        if self.cfg.persistence_mode:
            names.append("gpu persistence mode")
        if self.cfg.gpu_clocks:
            names.append("gpu locked clocks")
        if self.cfg.memory_clock_mhz is not None:
            names.append("gpu memory locked clocks")
        if gpu is None:
            for name in names:
                self.items.append(_na(name, f"gpu{self.cfg.gpu_index}", gpu_note))
            return
        host, target = self.env.host, f"gpu{gpu.index}"
        if self.cfg.persistence_mode:
            reason = "the driver stays loaded between clients (no re-initialisation latency)"
            self.setting(
                GpuPersistence(
                    host,
                    name="gpu persistence mode",
                    target=target,
                    reason=reason,
                    bus_id=gpu.bus_id,
                )
            )
        if not (self.cfg.gpu_clocks or self.cfg.memory_clock_mhz is not None):
            return
        nvml = host.nvml
        try:
            mem, gfx = supported_clocks(nvml, gpu)
        except nvml_errors(nvml) as exc:
            why = "not supported" if is_not_supported(nvml, exc) else str(exc)
            for name in names[1 if self.cfg.persistence_mode else 0 :]:
                self.items.append(_na(name, target, f"supported clocks unreadable: {why}"))
            return
        if self.cfg.gpu_clocks:
            self._lock_clock(
                GpuLockedClocks,
                "gpu locked clocks",
                "no clock ramp-up at the start of each request",
                gfx,
                self.cfg.gpu_clock_mhz,
                gpu,
                target,
            )
        if self.cfg.memory_clock_mhz is not None:
            self._lock_clock(
                GpuMemoryLockedClocks,
                "gpu memory locked clocks",
                "steady memory bandwidth",
                mem,
                self.cfg.memory_clock_mhz,
                gpu,
                target,
            )

    def _lock_clock(
        self,
        kind: type[GpuLockedClocks] | type[GpuMemoryLockedClocks],
        name: str,
        reason: str,
        supported: list[int],
        wanted_mhz: int | None,
        gpu: GpuInfo,
        target: str,
    ) -> None:
        """One locked-clock setting (graphics or memory), or why it is not applicable."""
        if not supported:
            self.items.append(_na(name, target, "no supported clocks listed"))
            return
        mhz = pick_clock(supported, wanted_mhz)
        self.setting(
            kind(
                self.env.host,
                name=name,
                target=target,
                reason=reason,
                bus_id=gpu.bus_id,
                mhz=mhz,
            ),
            note=_clock_note(wanted_mhz, mhz),
        )

    def numa(self, gpu: GpuInfo | None, gpu_note: str) -> None:
        if gpu is None:
            self.items.append(_na("numa binding", "ttsd serve", gpu_note, needs_root=False))
            return
        desired = planned_binding(self.cfg, gpu)
        if self.cfg.numa_bind:
            note = "ttsd serve binds itself at start-up, before its threads start"
            action = INFO
        else:
            note = "off (tuning.numa_bind: false)"
            action = SKIP
        self.items.append(PlanItem("numa binding", "ttsd serve", "-", desired, False, action, note))

    def pcie(self, gpu: GpuInfo | None, gpu_note: str) -> None:
        if gpu is None:
            self.items.append(_na("pcie link", "GPU", gpu_note, needs_root=False))
            return
        try:
            link = pcie_link(self.fs, self.env.host.nvml, gpu)
        except GpuUnavailable as exc:
            self.items.append(_na("pcie link", gpu.bdf, str(exc), needs_root=False))
            return
        notes = [f"read from {link.source}; report only, PCI config space is never written"]
        action = OK
        if link.width < link.max_width:
            action = WARN
            notes.insert(0, "link narrower than its maximum: check the slot and riser")
        if link.gen < link.max_gen:
            action = WARN
            notes.insert(
                0, "link below its maximum speed (GPUs slow the link when idle: recheck under load)"
            )
        if action == WARN:
            self.warnings.append(
                f"PCIe link of {gpu.bdf} degraded: {link.describe()} of {link.describe_max()}"
            )
        self.items.append(
            PlanItem(
                "pcie link",
                gpu.bdf,
                link.describe(),
                link.describe_max(),
                False,
                action,
                "; ".join(notes),
            )
        )

    def conflicts(self) -> None:
        owns = {
            services.TUNED: "CPU governor, energy preference and IRQ affinity",
            services.POWER_PROFILES: "CPU governor and energy preference",
        }
        for daemon, what in owns.items():
            if daemon not in self.env.running:
                continue
            effect = "overridden (--force)" if self.force else "left alone (--force overrides)"
            self.items.append(
                PlanItem(
                    "conflict", daemon, "running", "-", False, WARN, f"owns the {what}: {effect}"
                )
            )
            self.warnings.append(f"{daemon} is running and manages the {what}; these are {effect}.")


def _clock_note(wanted: int | None, mhz: int) -> str:
    if wanted is None:
        return "highest supported clock"
    if wanted != mhz:
        return f"{wanted} MHz is not a supported clock; nearest below is {mhz} MHz"
    return ""


def build_plan(
    cfg: TuningConfig,
    env: Environment,
    *,
    force: bool = False,
    skipped: Mapping[str, str] | None = None,
) -> Plan:
    """Read the system and decide each setting.  ``skipped``: refusals remembered in the state."""
    b = _Builder(cfg, env, force, skipped or {})
    gpu: GpuInfo | None
    try:
        gpu = find_gpu(env.host.fs, env.host.nvml, cfg.gpu_index)
        gpu_note = gpu.describe()
    except GpuUnavailable as exc:
        gpu, gpu_note = None, str(exc)
    b.conflicts()
    b.cpus(gpu, gpu_note)
    b.irqs(gpu, gpu_note)
    b.gpu_settings(gpu, gpu_note)
    b.numa(gpu, gpu_note)
    b.pcie(gpu, gpu_note)
    return Plan(
        root=str(env.host.fs.root),
        is_root=env.is_root,
        gpu=gpu,
        gpu_note=gpu_note,
        running=env.running,
        items=b.items,
        warnings=b.warnings,
    )
