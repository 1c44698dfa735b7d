"""packaging/Containerfile, linted: no image builder (podman, buildah) is installed here and
a build needs the network for its base image, so the file is read instead — the same
daemon and command line as the unit, a non-root user, /healthz as the health check, a
config the daemon accepts that keeps the HTTP door's key rule (docs/scale-out.md)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from appliance.ops.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "packaging" / "Containerfile"
UNIT = REPO / "systemd" / "ttsd.service"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in CONTAINERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if line.endswith("\\"):
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "a continuation line ends the file"
    return out


def only(name: str) -> str:
    found = [args for word, args in instructions() if word == name]
    assert len(found) == 1, (name, found)
    return found[0]


def unit_exec_start() -> list[str]:
    line = next(x for x in UNIT.read_text().splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_runs_the_units_command_as_its_user() -> None:
    words = [w for w, _ in instructions()]
    assert words[0] == "FROM" and not only("FROM").endswith(":latest")
    assert json.loads(only("ENTRYPOINT")) == unit_exec_start()
    # The last USER before the ENTRYPOINT is the unit's (non-root) user.
    users = [a for w, a in instructions() if w == "USER"]
    assert users and users[-1] == "ttsd"
    assert words.index("ENTRYPOINT") > max(i for i, w in enumerate(words) if w == "USER")
    assert only("STOPSIGNAL") == "SIGTERM"
    assert "ADD" not in words  # nothing fetched from a URL at build time


def test_the_health_check_is_healthz_on_the_configured_door() -> None:
    check = only("HEALTHCHECK")
    options, _, cmd = check.partition("CMD ")
    argv = json.loads(cmd)  # exec form: no shell in the check
    assert argv[0] == "/opt/ttsd/venv/bin/python"
    url = re.search(r"http://127\.0\.0\.1:(\d+)/healthz", " ".join(argv))
    assert url, argv
    copied = dict(
        a.split()[::-1] for w, a in instructions() if w == "COPY" and not a.startswith(".")
    )
    cfg = load_config(REPO / copied["/etc/ttsd/config.yaml"])
    assert cfg.http.listen is not None and cfg.http.listen.endswith(":" + url.group(1))
    # Off loopback the HTTP door needs a key: the image names a key file (a secret).
    assert cfg.http.api_key_file and cfg.http.api_key is None
    assert "--start-period" in options  # the voices load before /healthz answers


def test_stopping_fits_the_grace_the_run_command_gives() -> None:
    text = CONTAINERFILE.read_text()
    grace = int(re.search(r"--stop-timeout=(\d+)", text).group(1))  # type: ignore[union-attr]
    unit_grace = int(re.search(r"TimeoutStopSec=(\d+)", UNIT.read_text()).group(1))  # type: ignore[union-attr]
    cfg = load_config(REPO / "packaging" / "config.container.yaml")
    assert grace == unit_grace
    assert cfg.limits.drain_notice_s + cfg.limits.shutdown_timeout_s < grace


def test_what_it_copies_is_in_the_tree() -> None:
    for word, args in instructions():
        if word == "COPY":
            src = args.split()[0]
            assert (REPO / src).exists(), src
    ignored = (REPO / ".containerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
