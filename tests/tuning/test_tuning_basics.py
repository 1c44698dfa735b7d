"""CPU lists, bus ids, clock choice and daemon detection; the documented --root tree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from tuning_fakes import build_tree

from tuning.gpu import pick_clock, sysfs_bdf
from tuning.services import running_services
from tuning.sysfs import SysRoot, format_cpulist, parse_cpulist


def test_cpulist_examples() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("") == frozenset()
    assert parse_cpulist("0-7:2") == {0, 2, 4, 6}
    assert format_cpulist({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"


@given(st.sets(st.integers(0, 300), max_size=40))
def test_cpulist_round_trip(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_nvml_bus_id_to_sysfs() -> None:
    # NVML: 8-digit domain, upper case; sysfs: the kernel's %04x.
    assert sysfs_bdf("00000000:3B:00.0") == "0000:3b:00.0"
    assert sysfs_bdf("00010000:01:00.0") == "10000:01:00.0"


def test_pick_clock() -> None:
    supported = [1980, 1755, 1410]
    assert pick_clock(supported, None) == 1980
    assert pick_clock(supported, 1800) == 1755
    assert pick_clock(supported, 100) == 1410


def test_services_from_proc_comm(tmp_path: Path) -> None:
    root = build_tree(tmp_path, processes=("systemd", "tuned", "power-profiles-daemon", "bash"))
    # The kernel truncates comm to 15 characters: "power-profiles-".
    assert (tmp_path / "proc/3/comm").read_text() == "power-profiles-\n"
    assert running_services(SysRoot(root)) == {"tuned", "power-profiles-daemon"}


def test_services_none_running(tmp_path: Path) -> None:
    root = build_tree(tmp_path, processes=("systemd", "irqbalanced-not", "tuned-adm"))
    assert running_services(SysRoot(root)) == frozenset()


def _root_tree_example() -> str:
    doc = (Path(__file__).resolve().parents[2] / "docs/tuning.md").read_text()
    section = doc.split("## The `--root` tree", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_root_tree_of_the_docs_is_a_machine(tmp_path: Path) -> None:
    """docs/tuning.md did not say what a --root tree holds; its example is one that works."""
    bin_dir = str(Path(sys.executable).parent)  # where ttsd is installed
    script = _root_tree_example() + 'printf "%s\\n" "$R" > "$OUT"\n'
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "r")}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"cpu governor\s+cpu0-1\s+powersave → performance .* will change", proc.stdout)
    root = Path((tmp_path / "r").read_text().strip())
    governor = root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"
    if os.geteuid() == 0:  # apply and revert as the docs say
        for step, value in (("apply", "performance"), ("revert", "powersave")):
            run = subprocess.run(
                [sys.executable, "-m", "tuning", step, "--root", str(root)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            assert governor.read_text().strip() == value
        assert not (root / "run/ttsd-tuning/tuning.json").exists()
    shutil.rmtree(root)
