"""apply / verify / revert on the fake tree and the fake NVML."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from tuning_fakes import MANAGED_IRQ, FakeNvml, RunCli, managed_irq_fault, snapshot

from tuning import state as statefile
from tuning.setting import Host
from tuning.sysfs import SysRoot

GOV = "sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor"
EPP = "sys/devices/system/cpu/cpu{}/cpufreq/energy_performance_preference"
IRQ = "proc/irq/{}/smp_affinity_list"
FULL = "tuning:\n  energy_performance_preference: true\n  memory_clock_mhz: 3201\n"


@pytest.fixture
def full_config(tmp_path: Path) -> str:
    cfg = tmp_path / "full.yaml"
    cfg.write_text(FULL)
    return str(cfg)


def state_path(tree: Path) -> Path:
    return tree / "run/ttsd-tuning/tuning.json"


def test_apply_then_revert_is_byte_identical(
    run_cli: RunCli, tree: Path, nvml: FakeNvml, full_config: str
) -> None:
    before = snapshot(tree)
    rc, out = run_cli("apply", "--config", full_config)
    assert rc == 0, out
    for cpu in range(8):
        assert (tree / GOV.format(cpu)).read_text().strip() == "performance"
        assert (tree / EPP.format(cpu)).read_text().strip() == "performance"
    for irq in (40, 41, 42):
        assert (tree / IRQ.format(irq)).read_text().strip() == "4-7"
    gpu = nvml.state()
    assert (gpu["persistence"], gpu["locked"], gpu["mem_locked"]) == (1, 1980, 3201)
    # The managed IRQ is skipped and reported, not a failure.
    assert (tree / IRQ.format(MANAGED_IRQ)).read_text() == "0-7\n"
    assert f"skipped: irq affinity irq{MANAGED_IRQ}: kernel-managed IRQ" in out
    saved = json.loads(state_path(tree).read_text())
    assert saved["schema"] == "ttsd.tune.state/1"
    assert f"irq-affinity:/proc/irq/{MANAGED_IRQ}/smp_affinity_list" in saved["skipped"]

    assert run_cli("verify", "--config", full_config)[0] == 0

    rc, out = run_cli("revert")
    assert rc == 0, out
    assert snapshot(tree) == before
    assert not state_path(tree).exists()
    # Idempotent: nothing left to do, still success, still identical.
    rc, out = run_cli("revert")
    assert (rc, out.strip()) == (0, "nothing to revert (no state file)")
    assert snapshot(tree) == before


def test_originals_saved_before_the_first_write(
    run_cli: RunCli, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    original_write = SysRoot.write

    def spying_write(self: SysRoot, rel: str, value: str) -> None:
        seen.append(state_path(tree).exists())
        original_write(self, rel, value)

    monkeypatch.setattr(SysRoot, "write", spying_write)
    assert run_cli("apply")[0] == 0
    assert seen and all(seen)


def test_verify_lists_drift(run_cli: RunCli, tree: Path, nvml: FakeNvml) -> None:
    rc, out = run_cli("verify")
    assert rc == 1
    assert "no state file" in out
    assert run_cli("apply")[0] == 0
    (tree / GOV.format(5)).write_text("powersave\n")
    nvml.nvmlDeviceResetGpuLockedClocks(("gpu", 0))
    rc, out = run_cli("verify", "--json")
    assert rc == 1
    report = json.loads(out)
    assert report["ok"] is False
    assert sorted(report["drift"]) == [
        "cpu governor cpu5: is powersave, want performance",
        "gpu locked clocks gpu0: is 345 MHz, want 1980 MHz",
    ]
    # The managed IRQ was never ours to set: not drift.
    assert not any(f"irq{MANAGED_IRQ}" in d for d in report["drift"])


@pytest.mark.parametrize("where", ["gpu-lock", "sysfs-write"])
def test_failure_half_way_reverts_everything(
    run_cli: RunCli, tree: Path, nvml: FakeNvml, where: str
) -> None:
    faults = managed_irq_fault()
    if where == "gpu-lock":
        # The last setting applied: governors, IRQs and persistence are already set.
        nvml.set_fail("nvmlDeviceSetGpuLockedClocks", FakeNvml.NVML_ERROR_NO_PERMISSION)
    else:
        faults["/" + IRQ.format(42)] = errno.EINVAL
    before = snapshot(tree)
    rc, out = run_cli("apply", faults=faults)
    assert rc == 1
    assert "apply failed at" in out and "rolled back" in out
    assert snapshot(tree) == before
    assert nvml.state()["persistence"] == 0
    assert not state_path(tree).exists()


def test_not_supported_lock_is_skipped_not_failed(
    run_cli: RunCli, tree: Path, nvml: FakeNvml
) -> None:
    nvml.set_fail("nvmlDeviceSetGpuLockedClocks", FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    rc, out = run_cli("apply")
    assert rc == 0, out
    assert "skipped: gpu locked clocks gpu0" in out
    assert (tree / GOV.format(0)).read_text() == "performance"
    assert run_cli("verify")[0] == 0


def test_second_apply_keeps_the_first_originals(run_cli: RunCli, tree: Path) -> None:
    before = snapshot(tree)
    assert run_cli("apply")[0] == 0
    # A second apply (say the daemon restarted without its ExecStopPost) must not
    # record "performance" as the original.
    (tree / GOV.format(2)).write_text("powersave\n")
    assert run_cli("apply")[0] == 0
    entries = statefile.load(state_path(tree), root=tree)
    assert entries is not None
    assert {e.original for e in entries.entries if e.kind == "sysfs"} == {"powersave\n"}
    assert run_cli("revert")[0] == 0
    assert snapshot(tree) == before


def test_non_root(run_cli: RunCli, tree: Path, nvml: FakeNvml) -> None:
    before = snapshot(tree)
    rc, out = run_cli("plan", is_root=False)
    assert rc == 0
    assert "must run as root" in out
    rc, out = run_cli("verify", is_root=False)
    assert rc == 1 and "drift: cpu governor cpu0" in out
    rc, out = run_cli("apply", "--json", is_root=False)
    assert rc == 1
    report = json.loads(out)
    assert "nothing changed" in report["messages"][0]
    assert "cpu governor cpu0" in report["needs_root"]
    assert "gpu locked clocks gpu0" in report["needs_root"]
    assert snapshot(tree) == before
    assert not state_path(tree).exists()

    # Revert as non-root changes nothing either, and keeps the state for root.
    assert run_cli("apply")[0] == 0
    applied = snapshot(tree)
    rc, out = run_cli("revert", is_root=False)
    assert rc == 1 and "needs root" in out
    assert snapshot(tree) == applied
    assert run_cli("revert")[0] == 0
    assert snapshot(tree) == before


def test_revert_without_nvml_keeps_gpu_entries(run_cli: RunCli, tree: Path) -> None:
    before = snapshot(tree)
    assert run_cli("apply")[0] == 0
    rc, out = run_cli("revert", gpu=False)
    assert rc == 1 and "NVML not available" in out
    left = statefile.load(state_path(tree), root=tree)
    assert left is not None
    assert {e.kind for e in left.entries} == {"gpu-persistence", "gpu-locked-clocks"}
    assert run_cli("revert")[0] == 0
    assert snapshot(tree) == before


def test_corrupt_state_file_is_reported(run_cli: RunCli, tree: Path) -> None:
    path = state_path(tree)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert run_cli("revert")[0] == 1
    assert path.read_text() == "{not json"


def test_state_save_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "d" / "state.json"
    st = statefile.State(entries=[statefile.Entry("k", "sysfs", {"a": 1}, "x\n")])
    statefile.save(path, st, root=tmp_path)
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temp left behind
    loaded = statefile.load(path, root=tmp_path)
    assert loaded is not None and loaded.entries == st.entries
    assert Host(fs=SysRoot(tmp_path)).nvml is None
