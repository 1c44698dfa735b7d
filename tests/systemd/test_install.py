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
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

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
        "would run: apt-get install -y --no-install-recommends libportaudio2 libsonic0",
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


# --- the interpreter the service runs (ProtectHome=yes, PrivateTmp=yes) -------------------
# install.sh, sourced, only defines its functions: these tests call them one by one.

BASE_PREFIX = os.path.realpath(sys.base_prefix)
SYSTEM_PREFIXES = ("/usr", "/usr/local")


def install_fn(script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash after sourcing install.sh."""
    proc = subprocess.run(
        ["bash", "-c", f'source "$1"\n{script}', "bash", str(INSTALL)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def other_system_pythons() -> list[str]:
    """System interpreters >= 3.11 that do not share this interpreter's prefix."""
    out = []
    for cand in ("/usr/bin/python3.11", "/usr/bin/python3", "/usr/local/bin/python3.11"):
        if not os.access(cand, os.X_OK):
            continue
        probe = subprocess.run(
            [
                cand,
                "-c",
                "import os, sys\n"
                "print(sys.version_info >= (3, 11), os.path.realpath(sys.base_prefix))",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        ok, _, prefix = probe.stdout.strip().partition(" ")
        if ok == "True" and prefix != BASE_PREFIX:
            out.append(cand)
    return out


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A directory the sandbox does not hide (unlike /tmp, /var/tmp and homes)."""
    d = Path(tempfile.mkdtemp(prefix="ttsd-install-test-", dir="/dev/shm"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def fake_venv(where: Path, python: str, ttsd_body: str) -> Path:
    """A venv from ``python`` (no pip: fast) whose ``bin/ttsd`` is ``ttsd_body``."""
    venv = where / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    ttsd = venv / "bin/ttsd"
    ttsd.write_text(ttsd_body)
    ttsd.chmod(0o755)
    return venv


def test_a_visible_python_is_kept() -> None:
    out = install_fn(
        f"HIDDEN_DIRS=(/nonexistent); PYTHON={sys.executable}; choose_python\n"
        'echo "python=$PYTHON copy=$COPY_PYTHON"'
    ).stdout
    assert out.splitlines()[-1] == f"python={sys.executable} copy=0"


def test_a_python_under_a_home_gives_way_to_a_system_python() -> None:
    """The pyenv case: the default python3 lives under ~, the service cannot see it."""
    others = other_system_pythons()
    if BASE_PREFIX in SYSTEM_PREFIXES or not others:
        pytest.skip("needs this interpreter outside /usr and a system python >= 3.11 beside it")
    out = install_fn(
        f"HIDDEN_DIRS=({BASE_PREFIX}); SYSTEM_PYTHONS=(/nonexistent {' '.join(others)})\n"
        f"PYTHON={sys.executable}; PYTHON_EXPLICIT=0; choose_python\n"
        'echo "python=$PYTHON copy=$COPY_PYTHON"'
    ).stdout
    assert f"needs {os.path.realpath(sys.executable)}, which the service cannot see" in out
    assert out.splitlines()[-1] == f"python={others[0]} copy=0"


def test_a_hidden_python_asked_for_is_copied_and_runs_from_the_copy(tmp_path: Path) -> None:
    if BASE_PREFIX in SYSTEM_PREFIXES:
        pytest.skip("this interpreter is the system's: nothing to copy")
    root = tmp_path / "root"
    out = install_fn(
        f"HIDDEN_DIRS=({BASE_PREFIX}); ROOT={root}\n"
        f"PYTHON={sys.executable}; PYTHON_EXPLICIT=1; choose_python; copy_python\n"
        'echo "python=$PYTHON copy=$COPY_PYTHON"\n'
        'hidden_need "$PYTHON" || echo "sees everything"'
    ).stdout
    ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    copy = root / f"opt/ttsd/python/bin/python{ver}"
    assert f"python={copy} copy=1" in out
    assert out.splitlines()[-1] == "sees everything"
    # The copy runs, with its own standard library and libpython, none of the original's.
    probe = subprocess.run(
        [str(copy), "-c", "import os, ssl, sys; print(os.path.realpath(sys.base_prefix))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert probe.stdout.strip() == str(root / "opt/ttsd/python")
    maps = subprocess.run(
        [str(copy), "-c", "print(open('/proc/self/maps').read())"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert BASE_PREFIX + "/" not in maps
    # The site-packages of the original (its global pip installs) stay behind.
    assert not any((root / f"opt/ttsd/python/lib/python{ver}/site-packages").iterdir())


def test_the_install_fails_when_the_venv_needs_a_hidden_path(shm_dir: Path) -> None:
    venv = fake_venv(shm_dir, sys.executable, "#!/bin/sh\necho ttsd 0\n")
    proc = install_fn(
        f"HIDDEN_DIRS=({BASE_PREFIX}); VENV={venv}; check_service_python", check=False
    )
    assert proc.returncode == 1
    assert "hidden from the service by ProtectHome=yes or PrivateTmp=yes" in proc.stderr
    assert "what to do: install python3.11 and python3.11-venv with apt" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="runs ttsd as another user: install.sh runs as root")
def test_the_service_check_runs_ttsd_with_homes_hidden(shm_dir: Path) -> None:
    """Without systemd (this container) the check runs ttsd as the service user in a mount
    namespace with /root, /home and /tmp hidden: a ttsd that needs /home fails the install."""
    probe = install_fn(f"PYTHON={sys.executable}; choose_python; echo $PYTHON $COPY_PYTHON")
    python, copy = probe.stdout.splitlines()[-1].split()
    if copy == "1":
        pytest.skip("no interpreter the sandbox can see without copying one")
    marker = Path(tempfile.mkdtemp(prefix="ttsd-install-test-", dir="/home"))
    try:
        marker.chmod(0o755)
        (marker / "needed").write_text("from /home\n")
        venv = fake_venv(shm_dir, python, f"#!/bin/sh\ncat {marker}/needed\n")
        # Readable by the service user when nothing is hidden ...
        plain = subprocess.run(
            ["runuser", "-u", "nobody", "--", str(venv / "bin/ttsd")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert plain.stdout == "from /home\n", plain.stderr
        # ... but not under the check's sandbox.
        proc = install_fn(
            f"VENV={venv}; USER_NAME=nobody; systemd_running() {{ false; }}; check_service_python",
            check=False,
        )
        assert proc.returncode == 1, proc.stdout
        assert "does not start as nobody with /root, /home and /tmp hidden" in proc.stderr
        ok = fake_venv(shm_dir / "ok", python, f"#!{venv}/bin/python\nprint('ttsd 0')\n")
        ok_proc = install_fn(
            f"VENV={ok}; USER_NAME=nobody; systemd_running() {{ false; }}; check_service_python"
        )
        assert "ttsd 0" in ok_proc.stdout
    finally:
        shutil.rmtree(marker)


def test_uninstall_reverts_the_tuning_before_removing_the_venv(tree: Path) -> None:
    out = run_install("--root", str(tree), "--uninstall").stdout
    revert = out.index(
        "would run: /opt/ttsd/venv/bin/ttsd tune revert --config /etc/ttsd/config.yaml"
    )
    assert revert < out.index("removed " + str(tree / "opt/ttsd"))


@pytest.mark.parametrize("state", ["run/ttsd/tuning.json", "run/ttsd-tuning/tuning.json"])
def test_uninstall_keeps_a_tuning_state_that_still_holds_originals(tree: Path, state: str) -> None:
    (tree / "run/ttsd").mkdir(parents=True)
    (tree / "run/ttsd/ttsd.sock").write_text("")
    path = tree / state
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"entries": [{"path": "/sys/x", "original": "1"}]}')
    proc = run_install("--root", str(tree), "--uninstall")
    assert path.read_text().startswith('{"entries"')
    assert f"kept /{Path(state).parent}: it holds the tuning state /{state}" in proc.stderr
    if Path(state).parent.name != "ttsd":
        # Without a state file in it, the service's runtime directory goes.
        assert not (tree / "run/ttsd").exists()


@pytest.mark.parametrize("exit_code", [0, 1])
def test_under_systemd_the_check_runs_ttsd_under_the_units_sandbox(
    shm_dir: Path, tmp_path: Path, exit_code: int
) -> None:
    """This machine has no systemd as pid 1: a stand-in systemd-run records its arguments."""
    python = install_fn(f"PYTHON={sys.executable}; choose_python; echo $PYTHON").stdout.split()[-1]
    venv = fake_venv(shm_dir, python, "#!/bin/sh\necho ttsd 0\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "args"
    (bindir / "systemd-run").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\nexit {exit_code}\n'
    )
    (bindir / "systemd-run").chmod(0o755)
    proc = install_fn(
        f"PATH={bindir}:$PATH; VENV={venv}; UNITDIR={REPO}/systemd; ROOT=\n"
        "HIDDEN_DIRS=(/nonexistent); systemd_running() { true; }; check_service_python",
        check=False,
    )
    args = record.read_text().splitlines()
    assert args[:4] == ["--wait", "--pipe", "--quiet", "--collect"]
    pairs = set(zip(args[4::2], args[5::2], strict=False))
    for prop in ("User=ttsd", "ProtectHome=yes", "PrivateTmp=yes", "ProtectSystem=strict"):
        assert ("-p", prop) in pairs, args
    assert ("-p", "SystemCallFilter=@system-service") in pairs, args
    assert args[-3:] == ["--", f"{venv}/bin/ttsd", "--version"]
    if exit_code == 0:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 1
        assert "does not start under the unit's sandbox" in proc.stderr
