"""install.sh puts sd_ttsd where speech-dispatcher finds modules, only when it is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = "usr/lib/speech-dispatcher-modules"
CONF = "etc/speech-dispatcher/modules/ttsd.conf"


def install(root: Path, *args: str) -> str:
    proc = subprocess.run(
        ["bash", str(REPO / "install.sh"), "--root", str(root), "--no-venv", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_module_and_conf_installed_when_speech_dispatcher_is(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / MODULES).mkdir(parents=True)
    install(root)
    assert os.readlink(root / MODULES / "sd_ttsd") == "/opt/ttsd/venv/bin/sd_ttsd"
    assert (root / CONF).read_bytes() == (REPO / "speechd/ttsd.conf").read_bytes()
    # An edited conf survives a re-run and a plain uninstall; --purge removes it.
    (root / CONF).write_text('TtsdSocket "/elsewhere.sock"\n')
    install(root)
    assert (root / CONF).read_text() == 'TtsdSocket "/elsewhere.sock"\n'
    install(root, "--uninstall")
    assert not (root / MODULES / "sd_ttsd").is_symlink()
    assert (root / CONF).exists()
    install(root)
    install(root, "--uninstall", "--purge")
    assert not (root / CONF).exists()
    assert (root / MODULES).is_dir()  # speech-dispatcher's own directory stays


def test_nothing_for_speech_dispatcher_without_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    out = install(root)
    assert "speech-dispatcher is not installed" in out
    assert not (root / "etc/speech-dispatcher").exists()
    assert not (root / MODULES).exists()


def test_a_foreign_sd_ttsd_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / MODULES).mkdir(parents=True)
    install(root)
    (root / MODULES / "sd_ttsd").unlink()
    (root / MODULES / "sd_ttsd").write_text("someone else's\n")
    install(root, "--uninstall")
    assert (root / MODULES / "sd_ttsd").read_text() == "someone else's\n"
