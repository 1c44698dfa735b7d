"""``ttsd tune plan``: the table, the JSON schema, conflicts, and a box without a GPU."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from tuning_fakes import BDF, IRQS, FakeNvml, RunCli, build_tree

from tuning.cli import Seams, main
from tuning.sysfs import SysRoot, online_cpus

ITEM_KEYS = {"key", "setting", "target", "current", "desired", "needs_root", "action", "note"}
ACTIONS = {"change", "none", "skip", "not-applicable", "ok", "warn", "info"}


def _plan_json(run_cli: RunCli, *args: str, **kw: Any) -> dict[str, Any]:
    rc, out = run_cli("plan", "--json", *args, **kw)
    assert rc == 0
    data: dict[str, Any] = json.loads(out)
    return data


def _rows(plan: dict[str, Any], setting: str) -> list[dict[str, Any]]:
    return [i for i in plan["items"] if i["setting"] == setting]


def test_plan_json_schema(run_cli: RunCli, tree: Path) -> None:
    plan = _plan_json(run_cli)
    assert plan["schema"] == "ttsd.tune.plan/1"
    assert plan["root"] == str(tree)
    assert plan["is_root"] is True
    assert plan["gpu"] == {
        "index": 0,
        "name": "NVIDIA H200",
        "bus_id": "00000000:3B:00.0",
        "bdf": BDF,
        "numa_node": 1,
        "cpus": "4-7",
    }
    assert plan["running_services"] == []
    for item in plan["items"]:
        assert set(item) == ITEM_KEYS
        assert item["action"] in ACTIONS
        assert isinstance(item["needs_root"], bool)
        assert all(isinstance(item[k], str) for k in ITEM_KEYS - {"key", "needs_root"})
        assert (item["key"] is None) == (item["action"] not in {"change", "none", "skip"}) or (
            item["setting"] == "numa binding"
        )

    governors = _rows(plan, "cpu governor")
    assert [g["target"] for g in governors] == [f"cpu{i}" for i in range(8)]
    assert {(g["current"], g["desired"], g["action"]) for g in governors} == {
        ("powersave", "performance", "change")
    }
    irqs = _rows(plan, "irq affinity")
    assert [i["target"] for i in irqs] == [f"irq{n}" for n in IRQS]
    assert {(i["current"], i["desired"]) for i in irqs} == {("0-7", "4-7")}
    (clocks,) = _rows(plan, "gpu locked clocks")
    assert (clocks["current"], clocks["desired"], clocks["action"]) == (
        "345 MHz",
        "1980 MHz",
        "change",
    )
    (persist,) = _rows(plan, "gpu persistence mode")
    assert (persist["current"], persist["desired"]) == ("off", "on")
    (numa,) = _rows(plan, "numa binding")
    assert numa["desired"] == "CPUs 4-7, memory preferred node 1"
    assert numa["needs_root"] is False
    (pcie,) = _rows(plan, "pcie link")
    assert (pcie["current"], pcie["desired"], pcie["action"]) == ("Gen4 x16", "Gen5 x16", "warn")
    assert any("PCIe link" in w for w in plan["warnings"])


def test_plan_table(run_cli: RunCli) -> None:
    rc, out = run_cli("plan")
    assert rc == 0
    lines = out.splitlines()
    assert lines[1].split() == ["SETTING", "TARGET", "CURRENT", "→", "DESIRED", "ROOT", "NOTE"]
    gov = next(line for line in lines if line.startswith("cpu governor"))
    assert "cpu0-7" in gov and "powersave → performance" in gov and "will change" in gov
    assert any(line.startswith("irq affinity") and "irq40-43" in line for line in lines)
    assert lines[-1] == "14 settings to change with `ttsd tune apply`"


def test_plan_does_not_write(run_cli: RunCli, tree: Path) -> None:
    from tuning_fakes import snapshot

    before = snapshot(tree)
    assert run_cli("plan")[0] == 0
    assert snapshot(tree) == before
    assert not (tree / "run").exists()


def test_governor_on_gpu_node_only(run_cli: RunCli, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tuning:\n  cpus: gpu-node\n  energy_performance_preference: true\n")
    plan = _plan_json(run_cli, "--config", str(cfg))
    assert [g["target"] for g in _rows(plan, "cpu governor")] == ["cpu4", "cpu5", "cpu6", "cpu7"]
    epp = _rows(plan, "cpu energy preference")
    assert {(e["current"], e["desired"]) for e in epp} == {("balance_performance", "performance")}


def test_memory_clock_rounds_down(run_cli: RunCli, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tuning:\n  gpu_clock_mhz: 1800\n  memory_clock_mhz: 5000\n")
    plan = _plan_json(run_cli, "--config", str(cfg))
    (gfx,) = _rows(plan, "gpu locked clocks")
    assert gfx["desired"] == "1755 MHz" and "nearest below is 1755" in gfx["note"]
    (mem,) = _rows(plan, "gpu memory locked clocks")
    assert mem["desired"] == "3201 MHz"


def test_no_gpu_is_not_applicable(run_cli: RunCli) -> None:
    plan = _plan_json(run_cli, gpu=False)
    assert plan["gpu"] is None
    for name in ("irq affinity", "gpu persistence mode", "gpu locked clocks", "numa binding"):
        (row,) = _rows(plan, name)
        assert row["action"] == "not-applicable"
        assert "NVML not available" in row["note"]
    # The CPU side does not need a GPU.
    assert {g["action"] for g in _rows(plan, "cpu governor")} == {"change"}


def test_nvml_not_supported_is_not_applicable(run_cli: RunCli, nvml: FakeNvml) -> None:
    nvml.set_fail("nvmlDeviceGetSupportedMemoryClocks", FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    nvml.set_fail("nvmlDeviceGetPersistenceMode", FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    plan = _plan_json(run_cli)
    (clocks,) = _rows(plan, "gpu locked clocks")
    assert clocks["action"] == "not-applicable" and "not supported" in clocks["note"]
    (persist,) = _rows(plan, "gpu persistence mode")
    assert persist["action"] == "not-applicable"


def test_pcie_falls_back_to_sysfs(run_cli: RunCli, nvml: FakeNvml) -> None:
    nvml.set_fail("nvmlDeviceGetCurrPcieLinkGeneration", FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    (pcie,) = _rows(_plan_json(run_cli), "pcie link")
    assert (pcie["current"], pcie["desired"]) == ("Gen4 x16", "Gen5 x16")
    assert "sysfs" in pcie["note"]


def test_tuned_is_not_fought(tmp_path: Path) -> None:
    root = build_tree(tmp_path / "r", processes=("systemd", "tuned"))
    nvml = FakeNvml.create(root / "fake-nvml.json")
    seams = Seams(nvml_loader=lambda: nvml, is_root=lambda: True, out=io.StringIO())

    def plan(*extra: str) -> dict[str, Any]:
        out = io.StringIO()
        assert main(["plan", "--json", "--root", str(root), *extra], seams=seams_out(out)) == 0
        data: dict[str, Any] = json.loads(out.getvalue())
        return data

    def seams_out(out: io.StringIO) -> Seams:
        return Seams(nvml_loader=seams.nvml_loader, is_root=seams.is_root, out=out)

    p = plan()
    assert p["running_services"] == ["tuned"]
    assert {g["action"] for g in _rows(p, "cpu governor")} == {"skip"}
    assert {i["action"] for i in _rows(p, "irq affinity")} == {"skip"}
    assert "managed by tuned" in _rows(p, "cpu governor")[0]["note"]
    # GPU settings are not tuned's.
    assert _rows(p, "gpu locked clocks")[0]["action"] == "change"
    (conflict,) = _rows(p, "conflict")
    assert conflict["target"] == "tuned" and conflict["action"] == "warn"

    forced = plan("--force")
    assert {g["action"] for g in _rows(forced, "cpu governor")} == {"change"}

    # And apply without --force leaves what tuned owns alone.
    before = (root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text()
    out = io.StringIO()
    assert main(["apply", "--root", str(root)], seams=seams_out(out)) == 0
    assert (root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text() == before
    assert nvml.state()["locked"] == 1980


def test_irqbalance_warning_has_the_remedy(tmp_path: Path) -> None:
    root = build_tree(tmp_path / "r", processes=("irqbalance",))
    nvml = FakeNvml.create(root / "fake-nvml.json")
    out = io.StringIO()
    seams = Seams(nvml_loader=lambda: nvml, is_root=lambda: True, out=out)
    assert main(["plan", "--json", "--root", str(root)], seams=seams) == 0
    p = json.loads(out.getvalue())
    (warning,) = [w for w in p["warnings"] if "irqbalance" in w]
    assert "--banirq=40 --banirq=41 --banirq=42 --banirq=43" in warning
    assert "IRQBALANCE_BANNED_CPULIST=4-7" in warning
    # irqbalance is warned about, not obeyed: the IRQs are still planned.
    assert {i["action"] for i in _rows(p, "irq affinity")} == {"change"}


def test_plan_on_this_machine_without_gpu() -> None:
    """The real root: a truthful table, GPU settings not applicable (no NVML here)."""
    out = io.StringIO()
    seams = Seams(nvml_loader=lambda: None, out=out)
    assert main(["plan", "--json", "--root", "/", "--config", os.devnull], seams=seams) == 0
    p = json.loads(out.getvalue())
    assert p["gpu"] is None
    for name in ("gpu persistence mode", "gpu locked clocks", "irq affinity", "pcie link"):
        assert {r["action"] for r in _rows(p, name)} == {"not-applicable"}
    online = online_cpus(SysRoot("/"))
    assert {r["target"] for r in _rows(p, "cpu governor")} == {f"cpu{c}" for c in online}
    for row in _rows(p, "cpu governor"):
        if not Path(f"/sys/devices/system/cpu/{row['target']}/cpufreq").exists():
            assert row["action"] == "not-applicable" and "no cpufreq" in row["note"]
