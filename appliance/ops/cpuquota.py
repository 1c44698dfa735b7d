"""The CPU time the kernel lets this process have: its cgroup's CFS quota, in CPUs.

A container's or a service's CPU limit (``docker run --cpus 1``, systemd's ``CPUQuota=``,
a Kubernetes CPU limit) is a quota per period, not a set of CPUs: ``sched_getaffinity``
still lists every core, and a daemon sized by it runs more threads than its quota feeds.
They use up each period's quota early and all wait, frozen, for the next one (on a 2-core
box under a 1-CPU quota, 16 asked streams: 20 stalls, first packet P95 440 ms;
docs/scheduling.md, "Under a CPU quota").  :func:`usable_cpus` is what the daemon sizes by:
its affinity, capped by the quota.

Read at start, and again while serving (``appliance.quotawatch``): from
``/proc/self/cgroup`` the process's cgroup, from
``/proc/self/mountinfo`` where its hierarchies are mounted, and the quota of that cgroup
and of each one above it (the smallest binds): cgroup v2's ``cpu.max``, v1's
``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``.  A file that cannot be read counts as no
quota.  ``root``: where the tree starts (tests give a fake one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 1 << 16
"""The most read of any one of these files (a mountinfo of a few hundred mounts)."""


@dataclass(frozen=True)
class _Mount:
    point: str
    """Where the hierarchy is mounted, e.g. ``/sys/fs/cgroup``."""
    root: str
    """The hierarchy's directory mounted there (``/`` but in some containers)."""
    v2: bool
    controllers: frozenset[str]


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _mounts(text: str) -> list[_Mount]:
    """The cgroup mounts of a mountinfo, whose lines read
    ``ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS] - TYPE SOURCE SUPER_OPTIONS``."""
    mounts = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(after[2].split(","))
        mounts.append(_Mount(fields[4], fields[3], after[0] == "cgroup2", options))
    return mounts


def _quota_v2(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    parts = text.split() if text else []
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    try:
        q, p = int((quota or "").strip()), int((period or "").strip())
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _along(root: Path, mount: _Mount, cgroup: str, v2: bool) -> list[float]:
    """The quotas from the process's cgroup up to its hierarchy's mount point."""
    rel = cgroup
    if mount.root != "/" and (cgroup == mount.root or cgroup.startswith(mount.root + "/")):
        rel = cgroup[len(mount.root) :]
    base = root / mount.point.lstrip("/")
    parts = [p for p in rel.split("/") if p and p not in (".", "..")]
    quotas = []
    for depth in range(len(parts), -1, -1):
        quota = (_quota_v2 if v2 else _quota_v1)(base.joinpath(*parts[:depth]))
        if quota is not None:
            quotas.append(quota)
    return quotas


def cpu_quota(root: Path = Path("/")) -> float | None:
    """The smallest CFS quota on this process's cgroup path, in CPUs (quota / period);
    None when there is none, or nothing can be read."""
    cgroups, mountinfo = _read(root / "proc/self/cgroup"), _read(root / "proc/self/mountinfo")
    if not cgroups or not mountinfo:
        return None
    mounts = _mounts(mountinfo)
    quotas: list[float] = []
    for line in cgroups.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "" and path:  # cgroup v2's one hierarchy: "0::/path"
            for m in (m for m in mounts if m.v2):
                quotas += _along(root, m, path, v2=True)
        elif "cpu" in controllers.split(","):
            for m in (m for m in mounts if not m.v2 and "cpu" in m.controllers):
                quotas += _along(root, m, path, v2=False)
    return min(quotas) if quotas else None


def usable_cpus(root: Path = Path("/")) -> float:
    """The CPUs this process may run on, capped by its cgroup's quota (at least 0.01)."""
    return capped_cpus(cpu_quota(root))


def capped_cpus(quota: float | None) -> float:
    """The CPUs this process may run on, capped by ``quota`` already read (at least 0.01)."""
    cpus = float(len(os.sched_getaffinity(0)))
    return max(0.01, min(cpus, quota) if quota is not None else cpus)
