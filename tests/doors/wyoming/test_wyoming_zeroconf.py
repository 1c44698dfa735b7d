"""The mDNS record Home Assistant discovers, built without touching the network; the URI
and config checks."""

from __future__ import annotations

import socket

import pytest

from appliance.doors.wyoming import SERVICE_TYPE, advertised_address, zeroconf_record
from appliance.ops.config import ConfigError, parse_config, wyoming_endpoint


def test_record_is_a_wyoming_service_on_our_port() -> None:
    info = zeroconf_record("ttsd-kitchen", 10200, ["192.168.1.5"])
    assert info.type == "_wyoming._tcp.local."
    assert SERVICE_TYPE == info.type
    assert info.name == "ttsd-kitchen._wyoming._tcp.local."
    assert info.port == 10200
    assert info.parsed_addresses() == ["192.168.1.5"]
    assert info.addresses == [socket.inet_aton("192.168.1.5")]
    assert info.properties[b"program"] == b"ttsd"


def test_advertised_address() -> None:
    assert advertised_address("127.0.0.1") is None  # unreachable from other hosts
    assert advertised_address("::1") is None
    assert advertised_address("192.168.7.9") == "192.168.7.9"
    wildcard = advertised_address("0.0.0.0")
    assert wildcard is None or not wildcard.startswith("0.")


def test_uri_forms() -> None:
    assert wyoming_endpoint("tcp://0.0.0.0:10200") == ("tcp", "0.0.0.0", 10200)
    assert wyoming_endpoint("tcp://[::1]:10200") == ("tcp", "::1", 10200)
    assert wyoming_endpoint("unix:///run/ttsd/wyoming.sock") == (
        "unix",
        "/run/ttsd/wyoming.sock",
        0,
    )
    for bad in ("tcp://host", "http://a:1", "tcp://a:99999", "unix://", "10200", "tcp://:1/x"):
        with pytest.raises(ConfigError, match=r"wyoming\.uri"):
            wyoming_endpoint(bad)


def test_config_section() -> None:
    cfg = parse_config({"wyoming": {"uri": "tcp://0.0.0.0:10200", "zeroconf": True}})
    assert cfg.wyoming.uri == "tcp://0.0.0.0:10200" and cfg.wyoming.zeroconf
    assert parse_config({}).wyoming.uri is None  # off by default
    with pytest.raises(ConfigError, match=r"wyoming\.uri"):
        parse_config({"wyoming": {"uri": "udp://x:1"}})
    with pytest.raises(ConfigError, match=r"wyoming.allowed_networks\[0\]"):
        parse_config({"wyoming": {"allowed_networks": ["not-a-net"]}})


def test_cli_flag_with_a_bad_uri_is_refused(tmp_path: object) -> None:
    import subprocess
    import sys

    serve = [sys.executable, "-m", "appliance.main", "serve"]
    out = subprocess.run(
        [*serve, "--config", "/dev/null", "--wyoming", "tcp://nohost"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--wyoming: wyoming.uri" in out.stderr
