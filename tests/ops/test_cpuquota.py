"""The CPU quota of the process's cgroup (appliance.ops.cpuquota): fake /proc and /sys trees
for each layout, and the kernel's own where a cgroup can be made here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.ops import cpuquota
from appliance.ops.cpuquota import cpu_quota, usable_cpus
from tests.cgroups import PROC, V1_CPU, V1_MEMORY, V2_MOUNT, fake_tree
from tests.conftest import DaemonFactory


def test_a_containers_own_cgroup_v2(tmp_path: Path) -> None:
    """``docker run --cpus 0.5`` with a cgroup namespace: the container sees its cgroup as /."""
    root = fake_tree(
        tmp_path, "0::/\n", [PROC, V2_MOUNT], {"/sys/fs/cgroup/cpu.max": "50000 100000\n"}
    )
    assert cpu_quota(root) == 0.5


def test_a_service_under_a_slice_the_smallest_quota_on_the_path_binds(tmp_path: Path) -> None:
    unit = "/sys/fs/cgroup/system.slice/ttsd.service"
    files = {
        f"{unit}/cpu.max": "max 100000\n",  # the unit sets none
        "/sys/fs/cgroup/system.slice/cpu.max": "150000 100000\n",  # its slice does
        "/sys/fs/cgroup/cpu.max": "max 100000\n",
    }
    cgroup = "0::/system.slice/ttsd.service\n"
    assert cpu_quota(fake_tree(tmp_path / "a", cgroup, [V2_MOUNT], files)) == 1.5
    files[f"{unit}/cpu.max"] = "120000 100000\n"
    assert cpu_quota(fake_tree(tmp_path / "b", cgroup, [V2_MOUNT], files)) == 1.2


def test_no_quota_anywhere_is_none(tmp_path: Path) -> None:
    files = {"/sys/fs/cgroup/user.slice/cpu.max": "max 100000\n"}
    assert cpu_quota(fake_tree(tmp_path, "0::/user.slice\n", [V2_MOUNT], files)) is None


def test_cgroup_v1_with_the_hierarchy_mounted_at_the_containers_cgroup(tmp_path: Path) -> None:
    """A v1 container without a cgroup namespace: /proc/self/cgroup names the host's path,
    and the mount's root is that same directory."""
    cgroup = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"
    mounts = [V1_MEMORY, V1_CPU.format(root="/docker/abc"), PROC]
    files = {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/memory/cpu.cfs_quota_us": "10000\n",  # not the cpu hierarchy
    }
    assert cpu_quota(fake_tree(tmp_path, cgroup, mounts, files)) == 2.0


def test_cgroup_v1_on_the_host_with_a_quota_above(tmp_path: Path) -> None:
    cgroup = "4:cpu,cpuacct:/ttsd/inner\n"
    base = "/sys/fs/cgroup/cpu,cpuacct"
    files = {
        f"{base}/ttsd/inner/cpu.cfs_quota_us": "-1\n",
        f"{base}/ttsd/inner/cpu.cfs_period_us": "100000\n",
        f"{base}/ttsd/cpu.cfs_quota_us": "75000\n",
        f"{base}/ttsd/cpu.cfs_period_us": "100000\n",
    }
    assert cpu_quota(fake_tree(tmp_path, cgroup, [V1_CPU.format(root="/")], files)) == 0.75


@pytest.mark.parametrize(
    "text", ["", "max", "abc 100000", "50000 0", "-5 100000", "1 2 3", "\x00\xff"]
)
def test_a_file_it_cannot_make_sense_of_is_no_quota(tmp_path: Path, text: str) -> None:
    files = {"/sys/fs/cgroup/cpu.max": text}
    assert cpu_quota(fake_tree(tmp_path, "0::/\n", [V2_MOUNT], files)) is None


def test_nothing_to_read_is_no_quota(tmp_path: Path) -> None:
    assert cpu_quota(tmp_path) is None  # no /proc at all
    root = fake_tree(tmp_path / "x", "0::/\n", [V2_MOUNT], {})  # no cpu.max (no cpu controller)
    assert cpu_quota(root) is None
    root = fake_tree(tmp_path / "y", "garbage\n::\n", ["one two", V2_MOUNT], {})
    assert cpu_quota(root) is None


def test_usable_cpus_are_the_affinity_capped_by_the_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(cpuquota, "cpu_quota", lambda root=Path("/"): 1.5)
    assert usable_cpus() == 1.5
    monkeypatch.setattr(cpuquota, "cpu_quota", lambda root=Path("/"): 6.0)
    assert usable_cpus() == 4.0
    monkeypatch.setattr(cpuquota, "cpu_quota", lambda root=Path("/"): None)
    assert usable_cpus() == 4.0


def test_the_kernels_quota_read_from_inside_its_cgroup(half_a_cpu: Path) -> None:
    code = "from appliance.ops.cpuquota import cpu_quota; print(cpu_quota())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: (half_a_cpu / "cgroup.procs").write_text(str(os.getpid())),
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert out.stdout.strip() == "0.5"


def test_the_daemon_under_a_quota_sizes_itself_by_it(
    half_a_cpu: Path, daemon_factory: DaemonFactory
) -> None:
    """The real daemon in a cgroup of half a CPU: its stats say so, admission's projection
    counts half a worker, and a request is served."""
    from appliance.clients.client import Client

    d = daemon_factory(cgroup=half_a_cpu)
    with Client(d.socket) as c:
        stats = c.stats()
        assert stats["scheduler"]["cpu_quota"] == 0.5
        assert stats["admission"]["capacity"] == 0.5  # of the 2 workers' 2
        done = c.synthesize_all("Half a core is enough for this.")
    assert done.duration_ms > 1000 and not done.cancelled
