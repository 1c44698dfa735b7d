"""The install a new user sees: `make run` quiet and lean, the package's metadata current."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO


def _make_n(target: str, tmp_path: Path) -> str:
    """What `make TARGET` would run in a checkout without a venv (nothing is run)."""
    proc = subprocess.run(
        ["make", "-n", "-C", str(REPO), f"VENV={tmp_path / 'venv'}", target],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_run_installs_only_what_running_needs(tmp_path: Path) -> None:
    """`make run` installed the dev extras (a 645 MB venv: mypy, matplotlib, pocketsphinx …)."""
    run = _make_n("run", tmp_path)
    assert "pip install --quiet -e .\n" in run and "[dev]" not in run
    for target in ("test", "bench", "venv"):
        assert "-e '.[dev]'" in _make_n(target, tmp_path), target


@pytest.mark.timeout(300)
def test_the_package_builds_without_deprecation_banners(tmp_path: Path) -> None:
    """`project.license` as a table and a licence classifier printed ten setuptools banners
    on every install."""
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    proc = subprocess.run(
        [*pip, "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "deprecat" not in (proc.stdout + proc.stderr).lower(), proc.stderr
    (wheel,) = tmp_path.glob("ttsd-*.whl")
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        lines = z.read(meta).decode().splitlines()
    assert "License-Expression: GPL-3.0-or-later" in lines
    assert not [line for line in lines if line.startswith("Classifier: License ::")]
