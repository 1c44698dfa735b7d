"""The daemon speaks under the unit's SystemCallFilter=.

This machine (CI, containers) has no systemd to run the unit, so the test applies the same
seccomp filter itself: the allow-list systemd builds from the unit's SystemCallFilter=
lines (expanded with ``systemd-analyze syscall-filter``), EPERM for everything else as
SystemCallErrorNumber= says.  A ``sitecustomize`` module loads it through libseccomp when
the daemon's interpreter starts, before ONNX Runtime, PortAudio or anything else is
imported.  Then the real daemon synthesizes and plays to a real PulseAudio null sink,
with its speaker thread real-time.
"""

from __future__ import annotations

import asyncio
import ctypes.util
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.concurrency import StreamConnection
from bench.pulsesink import PulseServer
from tests.conftest import Daemon, DaemonFactory
from tests.systemd.test_units import SYSTEMD, directives

SITECUSTOMIZE = r"""
import ctypes, errno, os

def _load() -> None:
    names = open(os.environ["TTSD_TEST_SECCOMP_ALLOW"]).read().split()
    lib = ctypes.CDLL(os.environ["TTSD_TEST_LIBSECCOMP"], use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    act_errno = 0x00050000 | errno.EPERM  # SCMP_ACT_ERRNO(EPERM)
    act_allow = 0x7FFF0000  # SCMP_ACT_ALLOW
    ctx = lib.seccomp_init(act_errno)
    assert ctx
    for name in names:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr >= 0:  # names of other architectures resolve to -1 (__NR_SCMP_ERROR)
            rc = lib.seccomp_rule_add(ctx, act_allow, nr, 0)
            assert rc == 0, (name, rc)
    # libseccomp sets no_new_privs first, as NoNewPrivileges=yes does.
    rc = lib.seccomp_load(ctx)
    assert rc == 0, rc

_load()
"""


def syscall_groups() -> dict[str, list[str]]:
    """``@group`` → its entries (syscalls and nested ``@groups``), from systemd itself."""
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze not found: install the 'systemd' package (make system-packages)"
    out = subprocess.run(
        [exe, "syscall-filter", "--no-pager"], capture_output=True, text=True, timeout=60
    ).stdout
    groups: dict[str, list[str]] = {}
    current = ""
    for raw in out.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not raw.startswith((" ", "\t")) and line.startswith("@"):
            current = line
            groups[current] = []
        elif current:
            groups[current].append(line)
    return groups


def expand(entry: str, groups: dict[str, list[str]]) -> set[str]:
    if not entry.startswith("@"):
        return {entry}
    out: set[str] = set()
    for e in groups[entry]:
        out |= expand(e, groups)
    return out


def unit_allow_list() -> set[str]:
    """What systemd allows for the unit's SystemCallFilter= lines: the first line's list
    (an allow-list), minus every later ``~`` line, plus every later positive one."""
    groups = syscall_groups()
    lines = directives(SYSTEMD / "ttsd.service")["Service.SystemCallFilter"]
    assert not lines[0].startswith("~"), "the unit's filter is an allow-list"
    allowed: set[str] = set()
    for line in lines:
        deny = line.startswith("~")
        names: set[str] = set()
        for entry in line.lstrip("~").split():
            names |= expand(entry, groups)
        allowed = allowed - names if deny else allowed | names
    return allowed


def test_the_allow_list_keeps_real_time_and_drops_privileged_calls() -> None:
    allowed = unit_allow_list()
    assert {"sched_setscheduler", "setpriority", "sched_setaffinity", "ioctl", "mmap"} <= allowed
    assert not {"setuid", "chown", "mount", "settimeofday", "init_module", "reboot"} & allowed


@pytest.fixture
def pulse_server(tmp_path: Path) -> Iterator[PulseServer]:
    server = PulseServer.start(tmp_path / "pulse")
    yield server
    server.stop()


async def _speak(daemon: Daemon, text: str) -> list[dict[str, object]]:
    conn = await StreamConnection.open(daemon.socket)
    try:
        await conn.send({"op": "speak", "id": 1, "text": text})
        events: list[dict[str, object]] = []
        while not events or events[-1]["event"] not in ("end", "error"):
            events.append(await asyncio.wait_for(conn.recv(), 60))
        health = await conn.call("health")
        events.append(health)
        return events
    finally:
        await conn.close()


def test_the_daemon_speaks_under_the_units_syscall_filter(
    tmp_path: Path, pulse_server: PulseServer, daemon_factory: DaemonFactory
) -> None:
    lib = ctypes.util.find_library("seccomp")
    assert lib, "libseccomp not found: it comes with the 'systemd' package"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    allow = tmp_path / "allow.txt"
    allow.write_text("\n".join(sorted(unit_allow_list())))
    env = {
        **pulse_server.env,
        "PYTHONPATH": str(site),
        "TTSD_TEST_SECCOMP_ALLOW": str(allow),
        "TTSD_TEST_LIBSECCOMP": lib,
    }
    daemon = daemon_factory(
        {"playback": {"enabled": True, "latency": 0.02, "sample_rate": pulse_server.rate}},
        env=env,
    )
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    assert re.search(r"(?m)^Seccomp:\s+2$", status), status  # 2 = filter mode
    assert re.search(r"(?m)^NoNewPrivs:\s+1$", status), status
    events = asyncio.run(_speak(daemon, "Hello from inside the sandbox."))
    health = events.pop()
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "end" and "started" in kinds, (events, daemon.log())
    assert events[-1].get("cancelled") is False, events
    playback = health["playback"]
    assert isinstance(playback, dict)
    assert playback["state"] == "ok", health
    if os.geteuid() == 0:
        # sched_setscheduler (@resources) passed the filter: the speaker thread is real-time.
        assert str(playback["priority"]).startswith("SCHED_FIFO"), playback
    assert daemon.alive()
