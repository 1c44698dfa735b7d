"""Cgroups for tests: fake ``/proc`` and cgroup trees (:func:`fake_tree`), and a real
cgroup of half a CPU (v1 ``cpu`` controller, the ``half_a_cpu`` fixture) where this process
may make one (root on a v1 host, or a privileged container); a test that needs it skips,
saying why, elsewhere.  The real cgroup is removed after the test, its processes moved back
first."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"
V1_CPU = "32 31 0:29 {root} /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct"
V1_MEMORY = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory"
PROC = "22 1 0:5 / /proc rw - proc proc rw"


def fake_tree(root: Path, cgroup: str, mounts: list[str], files: dict[str, str]) -> Path:
    """A fake ``/proc/self`` (``cgroup``, a mountinfo of ``mounts``) and cgroup files
    (``files``: absolute path → text) under ``root``, for ``appliance.ops.cpuquota``."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/self/mountinfo").write_text("\n".join(mounts) + "\n")
    for name, text in files.items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _writable_cpu_cgroup() -> Path | None:
    """This process's cgroup v1 cpu directory, where a child can be made (root, a host or a
    privileged container); None elsewhere."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    path = next((ln.split(":", 2)[2] for ln in lines if "cpu" in ln.split(":")[1].split(",")), None)
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    for line in mounts:
        head, _, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if path is None or len(after) < 3 or after[0] != "cgroup":
            continue
        if "cpu" in after[2].split(",") and fields[3] == "/":
            here = Path(fields[4], path.lstrip("/"))
            if os.access(here, os.W_OK) and (here / "cpu.cfs_quota_us").exists():
                return here
    return None


@pytest.fixture
def half_a_cpu(tmp_path: Path) -> Iterator[Path]:
    parent = _writable_cpu_cgroup()
    if parent is None:
        pytest.skip("no writable cgroup v1 cpu controller here (needs root on a v1 host)")
    cgroup = parent / f"ttsd-test-{os.getpid()}"
    try:
        cgroup.mkdir()
        (cgroup / "cpu.cfs_period_us").write_text("100000")
        (cgroup / "cpu.cfs_quota_us").write_text("50000")
    except OSError as exc:  # writable by its mode, refused all the same (a container's rules)
        if cgroup.exists():
            cgroup.rmdir()
        pytest.skip(f"cannot make a cgroup here: {exc}")
    try:
        yield cgroup
    finally:
        for pid in (cgroup / "cgroup.procs").read_text().split():
            (parent / "cgroup.procs").write_text(pid)
        cgroup.rmdir()
