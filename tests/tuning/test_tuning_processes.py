"""Across processes: revert after a crash, ``python -m tuning``, the daemon's self-binding."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tuning_fakes import FakeNvml, build_tree, snapshot

from appliance.ops.config import TuningConfig
from tuning.numa import bind_self

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DRIVER = str(HERE / "tuning_driver.py")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _driver(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, DRIVER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )


def test_killed_after_apply_then_new_process_reverts(tree: Path, nvml: FakeNvml) -> None:
    before = snapshot(tree)
    proc = subprocess.Popen(
        [sys.executable, DRIVER, "apply-and-hang", str(tree)],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("applied"):
                break
        assert lines[-1].strip() == "applied rc=0", "".join(lines)
        assert nvml.state()["locked"] == 1980
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert snapshot(tree) != before

    result = _driver("cli", str(tree), "revert")
    assert result.returncode == 0, result.stdout + result.stderr
    assert snapshot(tree) == before
    assert nvml.state()["locked"] is None


def test_python_dash_m_tuning(tree: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tuning", "plan", "--root", str(tree)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # No NVML in this process: the GPU rows say so; the CPU rows are planned.
    assert "not applicable: no NVIDIA GPU" in result.stdout
    assert "powersave → performance" in result.stdout


def test_daemon_binds_itself_and_its_threads(tmp_path: Path) -> None:
    # The GPU's node 1 holds CPU 1, which this 2-CPU machine has.
    root = build_tree(tmp_path / "r", nodes={0: "0", 1: "1"}, online="0-1", gpu_node=1)
    FakeNvml.create(root / "fake-nvml.json")
    result = _driver("bind", str(root))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["applied"] is True
    assert report["describe"].startswith("bound to node 1: CPUs 1, memory policy ")
    # Every thread, the ones started after the binding included, runs on CPU 1 only.
    assert len(report["threads"]) == 3
    assert {tuple(t["affinity"]) for t in report["threads"].values()} == {(1,)}
    assert set(report["tasks"].values()) == {"1"}
    # The memory policy: set where the kernel has node 1, else reported, never raised.
    if Path("/sys/devices/system/node/node1").exists():
        assert {tuple(t["mempolicy"]) for t in report["threads"].values()} == {(1, (1,))}
    else:
        assert "memory policy not set (Invalid argument)" in report["describe"]


def test_daemon_memory_policy_on_an_existing_node(tmp_path: Path) -> None:
    root = build_tree(tmp_path / "r", nodes={0: "1", 1: "0"}, online="0-1", gpu_node=0)
    FakeNvml.create(root / "fake-nvml.json")
    result = _driver("bind", str(root))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["describe"] == "bound to node 0: CPUs 1, memory policy preferred node 0"
    # MPOL_PREFERRED (1) on node 0, inherited by every thread.
    assert {json.dumps(t["mempolicy"]) for t in report["threads"].values()} == {"[1, [0]]"}


def test_bind_without_gpu_is_not_applicable(tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    result = bind_self(TuningConfig(root=str(tmp_path), numa_bind=True), None)
    assert result.applied is False
    assert result.describe() == ("NUMA binding not applicable: no NVIDIA GPU (NVML not available)")
    assert os.sched_getaffinity(0) == before


def _cpus_allowed(pid: int) -> dict[str, str]:
    tasks = {}
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                tasks[status.parent.name] = line.split(":", 1)[1].strip()
    return tasks


def test_ttsd_serve_binds_itself(tmp_path: Path, daemon_factory: Any) -> None:
    """The real daemon with a config asking for binding: all its threads on the GPU's node."""
    root = build_tree(tmp_path / "r", nodes={0: "0", 1: "1"}, online="0-1", gpu_node=1)
    FakeNvml.create(root / "fake-nvml.json")
    env = {
        "PYTHONPATH": os.pathsep.join([str(HERE / "fake_pynvml"), str(REPO)]),
        "TUNING_FAKE_NVML": str(root / "fake-nvml.json"),
    }
    daemon = daemon_factory({"tuning": {"numa_bind": True, "root": str(root)}}, env=env)
    try:
        tasks = _cpus_allowed(daemon.proc.pid)
        assert len(tasks) > 1  # the server's thread pools exist by now
        assert set(tasks.values()) == {"1"}, tasks
        assert "bound to node 1: CPUs 1, memory policy" in daemon.log()
    finally:
        daemon.stop()
