""".ci/system-packages: what `make test` and .ci/run run first on a fresh machine."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / ".ci/system-packages"


def as_unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run as a user who is neither root nor allowed ``sudo -n``."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]


def script_with_extra_package(name: str) -> list[str]:
    """argv running a copy of the script whose list also names ``name`` (a package no system
    has).  Run as ``bash -c`` so that an unprivileged user needs no readable copy on disk."""
    text, n = re.subn(r"(?m)^PACKAGES=\(\n", f"PACKAGES=(\n    {name}\n", SCRIPT.read_text())
    assert n == 1
    return ["bash", "-c", text, "system-packages"]


def test_make_test_and_ci_run_share_the_step() -> None:
    makefile = (REPO / "Makefile").read_text()
    (deps,) = re.findall(r"(?m)^test:(.*)$", makefile)
    assert deps.split()[0] == "system-packages"
    assert re.search(r"(?m)^system-packages:\n\t@?\.ci/system-packages$", makefile)
    ci = (REPO / ".ci/run").read_text()
    assert "make test" in ci
    assert "apt-get" not in ci  # no second list to keep in step


@contextlib.contextmanager
def readable_copy() -> Iterator[Path]:
    """The script copied where an unprivileged user can read and run it, and enter: a
    checkout may sit in a directory only its owner can enter (a clone into ``mktemp -d`` or
    a 0700 home), and `make test` failed there with "permission denied"."""
    with tempfile.TemporaryDirectory(prefix="ttsd-syspkg-") as d:
        os.chmod(d, 0o755)
        copy = Path(d) / SCRIPT.name
        shutil.copyfile(SCRIPT, copy)
        copy.chmod(0o755)
        yield copy


def test_all_present_is_a_quick_no_op_without_root() -> None:
    """On this machine (CI installed everything) it needs neither root nor apt-get."""
    start = time.monotonic()
    with readable_copy() as script:
        proc = subprocess.run(
            as_unprivileged([str(script)]),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=script.parent,  # the checkout may be no directory that user can be in
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout + proc.stderr == ""
    assert time.monotonic() - start < 30  # dpkg queries only; apt-get update takes longer


def test_missing_package_without_root_or_sudo_fails_with_one_line() -> None:
    argv = script_with_extra_package("ttsd-no-such-package")
    proc = subprocess.run(
        as_unprivileged(argv), capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("system-packages: missing ttsd-no-such-package;")
    assert "root" in line and "sudo" in line


def test_dry_run_names_only_the_missing_packages() -> None:
    proc = subprocess.run(
        script_with_extra_package("ttsd-no-such-package"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEM_PACKAGES_DRY_RUN": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "system-packages: would install: ttsd-no-such-package\n"


@pytest.mark.parametrize("script", [".ci/system-packages", ".ci/run"])
def test_ci_scripts_pass_shellcheck(script: str) -> None:
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck not found: install the 'shellcheck' package (make system-packages)"
    proc = subprocess.run([exe, str(REPO / script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
