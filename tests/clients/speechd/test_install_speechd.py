"""install.sh puts sd_ttsd where speech-dispatcher finds modules, only when it is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

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


def test_the_module_directory_of_any_architecture_is_found(tmp_path: Path) -> None:
    """Only /usr/lib, x86_64 and aarch64 were looked at: on a Raspberry Pi (armhf), i386 or
    Fedora's /usr/libexec, install.sh said speech-dispatcher was not installed when it was."""
    for modules in (
        "usr/lib/arm-linux-gnueabihf/speech-dispatcher-modules",
        "usr/libexec/speech-dispatcher-modules",
    ):
        root = tmp_path / modules.split("/")[2]
        (root / modules).mkdir(parents=True)
        out = install(root)
        assert "not installed" not in out, out
        assert os.readlink(root / modules / "sd_ttsd") == "/opt/ttsd/venv/bin/sd_ttsd"
        install(root, "--uninstall")
        assert not (root / modules / "sd_ttsd").is_symlink()


def test_speech_dispatcher_without_a_module_directory_is_said_so(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/speech-dispatcher").write_text("#!/bin/sh\n")
    (root / "usr/bin/speech-dispatcher").chmod(0o755)
    out = install(root)
    assert "speech-dispatcher is installed, but its modules directory" in out, out
    assert "not installed" not in out


def _per_user_recipe() -> str:
    """The shell block after "Per user, without root" in docs/speechd.md."""
    doc = (REPO / "docs/speechd.md").read_text()
    after = doc.split("Per user, without root", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_per_user_recipe_in_the_docs_runs(tmp_path: Path) -> None:
    """It told users to run `spd-conf -u`, which speech-dispatcher 0.11 does not ship
    (python3-speechd does): command not found."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = str(Path(sys.executable).parent)  # where sd_ttsd is installed
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _per_user_recipe()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert proc.returncode == 0, proc.stderr
    config = home / ".config/speech-dispatcher"
    assert (config / "modules/ttsd.conf").is_file()
    assert (config / "speechd.conf").read_bytes() == Path(
        "/etc/speech-dispatcher/speechd.conf"
    ).read_bytes()
    link = home / ".local/libexec/speech-dispatcher-modules/sd_ttsd"
    assert os.path.realpath(link) == os.path.realpath(Path(bin_dir) / "sd_ttsd")
