"""The unit files say what the service contract needs, and agree with the example config."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from appliance.ops.config import Config, flatten, load_config, parse_config
from tests.conftest import REPO

SYSTEMD = REPO / "systemd"
EXAMPLE = SYSTEMD / "config.example.yaml"
VENV_BIN = "/opt/ttsd/venv/bin"


def directives(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` → values in order (systemd allows a key more than once)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return out


def test_service_is_a_supervised_notify_service() -> None:
    d = directives(SYSTEMD / "ttsd.service")
    assert d["Service.Type"] == ["notify"]
    assert d["Service.ExecStart"] == [f"{VENV_BIN}/ttsd serve --config /etc/ttsd/config.yaml"]
    # '+': the tuning steps run as root although the daemon does not.
    cfg = "--config /etc/ttsd/config.yaml"
    (pre,) = d["Service.ExecStartPre"]
    assert re.fullmatch(rf"-?\+{VENV_BIN}/ttsd tune apply {cfg}", pre)
    assert d["Service.ExecStopPost"] == [f"+{VENV_BIN}/ttsd tune revert {cfg}"]
    assert d["Service.User"] == ["ttsd"]
    assert d["Service.Group"] == ["ttsd"]
    assert d["Service.SupplementaryGroups"] == ["audio"]
    assert d["Service.RuntimeDirectory"] == ["ttsd"]
    assert d["Service.CacheDirectory"] == ["ttsd"]
    assert d["Service.Restart"] == ["on-failure"]
    assert int(d["Service.WatchdogSec"][0]) > 0
    assert int(d["Service.LimitRTPRIO"][0]) >= Config().playback.realtime_priority


def test_service_hardening_keeps_the_gpu_and_sound_reachable() -> None:
    d = directives(SYSTEMD / "ttsd.service")
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "DevicePolicy": "closed",
        "RestrictAddressFamilies": "AF_UNIX AF_NETLINK",
    }.items():
        assert d[f"Service.{key}"] == [value], key
    assert d["Service.DeviceAllow"] == ["char-nvidia* rw", "char-alsa rw"]
    # PrivateDevices= would hide /dev/nvidia*.
    assert "Service.PrivateDevices" not in d


def test_socket_unit_matches_the_service_socket() -> None:
    d = directives(SYSTEMD / "ttsd.socket")
    assert d["Socket.ListenStream"] == ["/run/ttsd/ttsd.sock"]
    assert d["Socket.SocketGroup"] == ["ttsd"]
    assert d["Socket.SocketMode"] == ["0660"]
    cfg = load_config(EXAMPLE)
    assert cfg.v1.socket == "/run/ttsd/ttsd.sock"
    # The daemon's own files live where the service's directories are.
    assert cfg.voices.cache_dir == "/var/cache/ttsd"
    # ... except the tuning state: root acts on it, so not in the service user's /run/ttsd.
    assert Path(cfg.tuning.state_file).parent == Path("/run/ttsd-tuning")


def _uncommented(text: str) -> str:
    """The example with every ``#key: value`` default line switched on."""
    return re.sub(r"(?m)^(\s*)#(?=[a-z_]+:)", r"\1", text)


def test_example_config_documents_every_key_with_its_default() -> None:
    text = EXAMPLE.read_text()
    full = parse_config(yaml.safe_load(_uncommented(text)))
    got, default = flatten(full), flatten(Config())
    assert {k for k in default if got[k] != default[k]} == {"v1.socket", "voices.cache_dir"}
    # Every key appears exactly once, commented or not, under its section.
    listed: list[str] = []
    section = ""
    for line in text.splitlines():
        if m := re.fullmatch(r"([a-z_0-9]+):", line):
            section = m.group(1)
        elif m := re.match(r"\s+#?([a-z_]+):", line):
            listed.append(f"{section}.{m.group(1)}")
    assert sorted(listed) == sorted(default)


def test_service_hardening_adds_what_costs_nothing() -> None:
    d = directives(SYSTEMD / "ttsd.service")
    for key, value in {
        "IPAddressDeny": "any",
        "ProtectKernelTunables": "yes",
        "ProtectProc": "invisible",
        "PrivateMounts": "yes",
        "RemoveIPC": "yes",
        "SystemCallErrorNumber": "EPERM",
    }.items():
        assert d[f"Service.{key}"] == [value], key
    # @resources stays allowed: SCHED_FIFO for the speaker thread, thread affinity for ORT.
    assert d["Service.SystemCallFilter"] == ["@system-service", "~@privileged"]
    # The speaker thread is real-time and cffi/CUDA need W+X pages.
    for key in ("RestrictRealtime", "MemoryDenyWriteExecute", "PrivateUsers", "ProcSubset"):
        assert f"Service.{key}" not in d, key


def test_systemd_exposure_is_at_most_2() -> None:
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze not found: install the 'systemd' package (make system-packages)"
    proc = subprocess.run(
        [exe, "security", "--offline=yes", "--no-pager", str(SYSTEMD / "ttsd.service")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    m = re.search(r"Overall exposure level for ttsd\.service: (\d+\.\d+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) <= 2.0, proc.stdout
