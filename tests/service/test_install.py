"""install.sh --root into a temporary tree: layout, idempotence, uninstall, systemd-analyze.

``--no-venv`` skips the pip install of the package and its heavy dependencies (minutes, and
network); everything else install.sh does to a tree runs for real.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "install.sh"


def run_install(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["bash", str(INSTALL), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every entry of the tree: kind and content (or link target), mode, mtime."""
    out: dict[str, tuple[str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                what = "link:" + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                what = "dir"
            else:
                what = "file:" + hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p.relative_to(root))] = (what, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    run_install("--root", str(root), "--no-venv")
    return root


def test_tree_has_the_expected_files_and_modes(tree: Path) -> None:
    def mode(rel: str) -> int:
        return stat.S_IMODE((tree / rel).lstat().st_mode)

    unit_dir = tree / "etc/systemd/system"
    assert (unit_dir / "ttsd.service").read_bytes() == (REPO / "systemd/ttsd.service").read_bytes()
    assert (unit_dir / "ttsd.socket").read_bytes() == (REPO / "systemd/ttsd.socket").read_bytes()
    assert mode("etc/systemd/system/ttsd.service") == 0o644
    assert mode("etc/systemd/system/ttsd.socket") == 0o644
    example = (REPO / "systemd/config.example.yaml").read_bytes()
    assert (tree / "etc/ttsd/config.yaml").read_bytes() == example
    assert mode("etc/ttsd/config.yaml") == 0o640
    assert (tree / "etc/ttsd/config.example.yaml").read_bytes() == example
    assert mode("var/cache/ttsd") == 0o750
    assert (tree / "opt/ttsd/doc/service.md").is_file()
    # Links name the final location, not the staging tree.
    assert os.readlink(tree / "usr/local/bin/ttsd") == "/opt/ttsd/venv/bin/ttsd"
    assert os.readlink(tree / "usr/local/bin/ttsctl") == "/opt/ttsd/venv/bin/ttsctl"
    assert not (tree / "opt/ttsd/venv").exists()


def test_root_mode_only_prints_system_changes(tmp_path: Path) -> None:
    out = run_install("--root", str(tmp_path / "r"), "--no-venv").stdout
    for expected in (
        "would run: apt-get install -y --no-install-recommends libportaudio2",
        "would run: useradd --system --gid ttsd",
        "would run: chown root:ttsd /etc/ttsd/config.yaml",
        "would run: runuser -u ttsd -- /opt/ttsd/venv/bin/ttsd prepare"
        " --config /etc/ttsd/config.yaml",
        "would run: systemctl enable --now ttsd.socket ttsd.service",
    ):
        assert expected in out
    out = run_install("--root", str(tmp_path / "s"), "--no-venv", "--no-start").stdout
    assert "systemctl enable" not in out


def test_second_run_changes_nothing(tree: Path) -> None:
    before = snapshot(tree)
    run_install("--root", str(tree), "--no-venv")
    assert snapshot(tree) == before


def test_existing_config_is_never_overwritten(tree: Path) -> None:
    config = tree / "etc/ttsd/config.yaml"
    config.write_text("logging:\n  level: debug\n")
    out = run_install("--root", str(tree), "--no-venv").stdout
    assert config.read_text() == "logging:\n  level: debug\n"
    assert "keeping the existing /etc/ttsd/config.yaml" in out


def test_uninstall_removes_everything_but_the_config(tree: Path) -> None:
    out = run_install("--root", str(tree), "--uninstall").stdout
    assert "would run: systemctl disable --now ttsd.service ttsd.socket" in out
    left = {p for p, (kind, _m, _t) in snapshot(tree).items() if kind != "dir"}
    assert left == {"etc/ttsd/config.yaml"}
    assert "kept /etc/ttsd/config.yaml" in out
    out = run_install("--root", str(tree), "--uninstall", "--purge").stdout
    assert "would run: userdel ttsd" in out
    assert not (tree / "etc/ttsd").exists()


def test_uninstall_leaves_foreign_links_alone(tree: Path) -> None:
    link = tree / "usr/local/bin/ttsctl"
    link.unlink()
    link.symlink_to("/usr/bin/someone-elses-ttsctl")
    run_install("--root", str(tree), "--uninstall")
    assert os.readlink(link) == "/usr/bin/someone-elses-ttsctl"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no-venv"], "--no-venv only works with --root"),
        (["--purge"], "--purge only works with --uninstall"),
        (["--frobnicate"], "unknown option: --frobnicate"),
        (["--root", "/"], "--root / would be this system"),
    ],
)
def test_failures_say_what_to_do(args: list[str], message: str) -> None:
    proc = run_install(*args, check=False)
    assert proc.returncode == 1
    assert f"error: {message}" in proc.stderr
    assert "what to do: " in proc.stderr


def _systemd_analyze_verify(root: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze not found: install the 'systemd' package (CI: .ci/run)"
    units = [str(root / "etc/systemd/system" / u) for u in ("ttsd.service", "ttsd.socket")]
    # --root: unit files and ExecStart= binaries resolve inside the tree.  The tree is not a
    # whole OS (no sysinit.target), so dependency errors of *other* units are not reported
    # (--recursive-errors=no); every problem in our two units still is.
    return subprocess.run(
        [exe, "verify", "--recursive-errors=no", f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )


def test_systemd_analyze_accepts_the_installed_units(tree: Path) -> None:
    # pip's console scripts, which --no-venv leaves out: verify checks they are executables.
    bindir = tree / "opt/ttsd/venv/bin"
    bindir.mkdir(parents=True)
    for name in ("ttsd", "ttsctl"):
        (bindir / name).write_text("#!/bin/sh\nexit 1\n")
        (bindir / name).chmod(0o755)
    proc = _systemd_analyze_verify(tree)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout + proc.stderr == ""


def test_systemd_analyze_checks_the_binaries_inside_the_tree(tree: Path) -> None:
    proc = _systemd_analyze_verify(tree)
    assert proc.returncode != 0
    assert "/opt/ttsd/venv/bin/ttsd is not executable" in proc.stderr


def test_install_script_passes_shellcheck() -> None:
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck not found: install the 'shellcheck' package (CI: .ci/run)"
    proc = subprocess.run([exe, str(INSTALL)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
