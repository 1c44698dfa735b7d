"""The state file as an attack surface: where it lives, how it is written, what load accepts.

``tune apply`` and ``tune revert`` run as root (systemd's ``+``) while the daemon does not:
nothing the service user can write may steer what root writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tuning_fakes import RunCli, snapshot

from appliance.ops.config import TuningConfig
from tuning import state as statefile

STATE_REL = "/run/ttsd-tuning/tuning.json"
GOV0 = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"


def _state(tree: Path) -> Path:
    return tree / STATE_REL.lstrip("/")


def _write_state(tree: Path, entries: list[dict[str, object]], **extra: object) -> Path:
    path = _state(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, object] = {
        "schema": statefile.SCHEMA,
        "created": 1.0,
        "entries": entries,
        "skipped": {},
    }
    data.update(extra)
    path.write_text(json.dumps(data))
    return path


def _sysfs_entry(path: str, original: str = "pwned\n", kind: str = "sysfs") -> dict[str, object]:
    return {
        "key": f"{kind}:{path}",
        "kind": kind,
        "params": {
            "name": "cpu governor",
            "target": "cpu0",
            "reason": "r",
            "path": path,
            "value": "performance",
        },
        "original": original,
    }


def _governor_entry() -> dict[str, object]:
    return _sysfs_entry(GOV0, original="ondemand\n")


def test_default_state_is_outside_the_services_runtime_directory() -> None:
    # /run/ttsd belongs to User=ttsd (RuntimeDirectory=): the state must not be in it.
    parent = Path(TuningConfig().state_file).parent
    assert parent == Path("/run/ttsd-tuning")
    assert Path("/run/ttsd") not in (parent, *parent.parents)


@pytest.mark.parametrize(
    "escape",
    ["dotdot", "not-a-tuned-file", "symlink-out-of-root", "symlink-out-of-sys"],
)
def test_revert_refuses_a_state_with_a_path_the_plan_never_writes(
    run_cli: RunCli, tree: Path, tmp_path: Path, escape: str
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    if escape == "dotdot":
        bad = "/../victim"
    elif escape == "not-a-tuned-file":
        bad = "/etc/shadow"
        (tree / "etc").mkdir()
        victim = tree / "etc/shadow"
        victim.write_text("precious\n")
    elif escape == "symlink-out-of-root":
        # cpu1's cpufreq directory replaced by a link that leaves the root.
        cpufreq = tree / "sys/devices/system/cpu/cpu1/cpufreq"
        for f in cpufreq.iterdir():
            f.unlink()
        cpufreq.rmdir()
        cpufreq.symlink_to(tmp_path)
        victim = tmp_path / "scaling_governor"
        victim.write_text("precious\n")
        bad = "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"
    else:
        # A link that stays inside the root but lands outside /sys.
        (tree / "etc").mkdir()
        cpufreq = tree / "sys/devices/system/cpu/cpu1/cpufreq"
        for f in cpufreq.iterdir():
            f.unlink()
        cpufreq.rmdir()
        cpufreq.symlink_to(tree / "etc")
        victim = tree / "etc/scaling_governor"
        victim.write_text("precious\n")
        bad = "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"
    # One legitimate entry beside the bad one: the file is refused whole.
    path = _write_state(tree, [_governor_entry(), _sysfs_entry(bad)])
    before = snapshot(tree)
    rc, out = run_cli("revert", "--state-file", STATE_REL)
    assert rc == 1, out
    assert victim.read_text() == "precious\n"
    assert snapshot(tree) == before  # the good entry was not reverted either
    assert path.exists()  # kept for a human to look at


def test_refusal_message_is_clear(
    run_cli: RunCli, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_state(tree, [_sysfs_entry("/../victim")])
    rc, _ = run_cli("revert", "--state-file", STATE_REL)
    err = capsys.readouterr().err
    assert rc == 1
    assert "refused" in err and "/../victim" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "entry",
    [
        # key does not match the setting it rebuilds
        {**_governor_entry(), "key": "sysfs:/proc/irq/1/smp_affinity_list"},
        # an unknown parameter
        {**_governor_entry(), "params": {**_governor_entry()["params"], "mode": 1}},  # type: ignore[dict-item]
        # a value the plan never sets
        {**_governor_entry(), "params": {**_governor_entry()["params"], "value": "x"}},  # type: ignore[dict-item]
        # an original that is not a kernel word
        _sysfs_entry(GOV0, original="\u00e9t\u00e9"),
        # a GPU entry with a bus id that is not one
        {
            "key": "gpu-persistence:gpu0",
            "kind": "gpu-persistence",
            "params": {"name": "n", "target": "gpu0", "reason": "r", "bus_id": "../x"},
            "original": "0",
        },
        # an IRQ entry whose path is a governor
        _sysfs_entry(GOV0, kind="irq-affinity"),
    ],
)
def test_revert_refuses_entries_the_plan_cannot_produce(
    run_cli: RunCli, tree: Path, entry: dict[str, object]
) -> None:
    _write_state(tree, [entry])
    before = snapshot(tree)
    rc, _ = run_cli("revert", "--state-file", STATE_REL)
    assert rc == 1
    assert snapshot(tree) == before


@pytest.mark.parametrize("created", ["yesterday", [1], None, True, "nan"])
def test_state_with_a_bad_created_is_a_message(
    run_cli: RunCli, tree: Path, capsys: pytest.CaptureFixture[str], created: object
) -> None:
    _write_state(tree, [_governor_entry()], created=created)
    rc, _ = run_cli("revert", "--state-file", STATE_REL)
    err = capsys.readouterr().err
    assert rc == 1
    assert "created" in err and "Traceback" not in err


def test_deeply_nested_state_is_a_message(
    run_cli: RunCli, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _state(tree)
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    rc, _ = run_cli("revert", "--state-file", STATE_REL)
    assert rc == 1
    assert "Traceback" not in capsys.readouterr().err


def test_symlink_planted_at_a_temp_name_is_not_followed(
    run_cli: RunCli, tree: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state_dir = _state(tree).parent
    state_dir.mkdir(parents=True)
    # The temp name the old code used, and a spread of others a guesser might try.
    for name in [f".tuning.json.{os.getpid()}.tmp", "tuning.json.tmp", ".tuning.json.tmp"]:
        (state_dir / name).symlink_to(victim)
    rc, out = run_cli("apply", "--state-file", STATE_REL)
    assert rc == 0, out
    assert victim.read_text() == "precious\n"
    assert json.loads(_state(tree).read_text())["schema"] == statefile.SCHEMA
    st = os.lstat(_state(tree))
    assert st.st_mode & 0o022 == 0


def test_state_file_that_is_a_symlink_is_refused(run_cli: RunCli, tree: Path) -> None:
    real = tree / "elsewhere.json"
    real.write_text(json.dumps({"schema": statefile.SCHEMA, "entries": []}))
    _state(tree).parent.mkdir(parents=True)
    _state(tree).symlink_to(real)
    rc, _ = run_cli("revert", "--state-file", STATE_REL)
    assert rc == 1
    assert real.exists()


@pytest.mark.parametrize("how", ["group-writable-dir", "world-writable-parent", "symlinked-dir"])
def test_state_in_a_place_others_can_write_is_refused(
    run_cli: RunCli, tree: Path, tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = _state(tree).parent
    if how == "group-writable-dir":
        state_dir.mkdir(parents=True)
        state_dir.chmod(0o775)
    elif how == "world-writable-parent":
        (tree / "run").mkdir()
        (tree / "run").chmod(0o1777)
    else:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        state_dir.parent.mkdir(parents=True, exist_ok=True)
        state_dir.symlink_to(elsewhere)
    before = snapshot(tree)
    rc, _ = run_cli("apply", "--state-file", STATE_REL)
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback" not in err and "state" in err
    assert snapshot(tree) == before  # nothing changed without a safe place for originals
    # and revert refuses to read from there too
    rc, _ = run_cli("revert", "--state-file", STATE_REL)
    assert rc == 1


def test_state_created_root_only(run_cli: RunCli, tree: Path) -> None:
    rc, out = run_cli("apply")
    assert rc == 0, out
    st = os.lstat(_state(tree).parent)
    assert st.st_uid == os.geteuid()
    assert st.st_mode & 0o022 == 0
    assert [p.name for p in _state(tree).parent.iterdir()] == ["tuning.json"]


def test_cpufreq_linked_inside_sys_as_on_a_real_kernel_still_reverts(
    run_cli: RunCli, tree: Path
) -> None:
    # On Linux cpuN/cpufreq is a symlink to ../cpufreq/policyN: a link that stays in /sys.
    cpu = tree / "sys/devices/system/cpu"
    (cpu / "cpufreq").mkdir()
    for n in range(8):
        (cpu / f"cpu{n}/cpufreq").rename(cpu / f"cpufreq/policy{n}")
        (cpu / f"cpu{n}/cpufreq").symlink_to(f"../cpufreq/policy{n}")
    before = snapshot(tree)
    rc, out = run_cli("apply")
    assert rc == 0, out
    assert (cpu / "cpufreq/policy3/scaling_governor").read_text() == "performance"
    rc, out = run_cli("revert")
    assert rc == 0, out
    assert snapshot(tree) == before
