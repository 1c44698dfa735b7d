"""Two real daemons behind the real HAProxy on loopback, running systemd/haproxy.cfg.example
(issue 33, docs/scale-out.md): a full box is out of rotation, a drained box finishes its
streams and gets no new ones, a killed box loses only its own streams, each an error to
its client.  The scenarios are bench/scaleout.py's (``python -m bench --only scaleout``
prints the same figures)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from collections.abc import Iterator

import pytest

from bench import scaleout
from tests.conftest import Daemon, DaemonFactory

# Capacity is the measured cost: beside the other test process, the boxes judged themselves
# full (DRAIN, DOWN) before the test began; alone, as the other solo tests run.
pytestmark = [pytest.mark.slow, pytest.mark.solo]

BOXES = [scaleout.Box("box1"), scaleout.Box("box2")]


@pytest.fixture(scope="module")
def rig(daemon_factory: DaemonFactory) -> Iterator[tuple[scaleout.HAProxy, dict[str, Daemon]]]:
    # A missing haproxy is a failure, not a skip: .ci/system-packages installs it.
    assert shutil.which("haproxy"), "haproxy is not installed (.ci/system-packages)"
    daemons = {b.name: daemon_factory(b.config()) for b in BOXES}
    hx = scaleout.HAProxy(BOXES)
    hx.start()
    try:
        for b in BOXES:
            hx.wait(b.name, scaleout.up, 30.0)
        yield hx, daemons
    finally:
        hx.stop()


def show(name: str, figures: dict[str, object]) -> None:
    print(f"\nscaleout {name}: {json.dumps(figures)}")


def test_a_full_box_is_out_of_rotation(rig: tuple[scaleout.HAProxy, dict[str, Daemon]]) -> None:
    hx, _ = rig
    r = scaleout.saturated(hx, BOXES[0], BOXES[1])
    show("saturated", r)
    # Both full: HAProxy's own answer is the JSON error a box would give (code busy).
    assert r["all_full"].startswith("503 ") and '"code":"busy"' in r["all_full"], r
    assert r["served"] == {"box2": r["sent"]} and r["busy"] == 0 and r["errors"] == 0, r


def test_c_a_drained_box_finishes_its_streams(
    rig: tuple[scaleout.HAProxy, dict[str, Daemon]], daemon_factory: DaemonFactory
) -> None:
    hx, daemons = rig

    def stop_box1() -> int:
        return daemons["box1"].stop(signal.SIGTERM, timeout=60)

    try:
        r = scaleout.drain(hx, BOXES[0], stop_box1)
    finally:
        # box1 back for the next scenario, on the same ports, even when this one failed:
        # else every later test fails on a box that is DOWN.
        if not daemons["box1"].alive():
            daemons["box1"] = daemon_factory(BOXES[0].config())
            hx.wait("box1", scaleout.up, 30.0)
    show("drain", r)
    # box1 was in rotation when told to stop (else this shows nothing about the drain).
    assert r["box1_before"][0] == "UP" and r["box1_before"][1].startswith("up ready"), r
    assert r["box1_exit"] == 0, r
    assert r["box1_streams"] >= 1 and r["box1_streams_whole"] == r["box1_streams"], r
    assert r["listeners"]["errors"] == 0 and r["new"]["errors"] == 0, r
    assert r["new"]["busy"] == 0 and r["new_on_box1_after_drain"] == 0, r
    assert r["new"]["served"].get("box2", 0) >= 1, r


def test_wyoming_goes_through_tcp_mode(rig: tuple[scaleout.HAProxy, dict[str, Daemon]]) -> None:
    """The recipe's Wyoming frontend: checked on the boxes' HTTP door and agent, a
    ``describe`` through it answered by a box."""
    hx, _ = rig
    for b in BOXES:
        hx.wait(b.name, scaleout.up, 30.0, backend="ttsd_wyoming")
    with socket.create_connection(("127.0.0.1", hx.wyoming_port), timeout=10) as s:
        s.sendall(b'{"type": "describe"}\n')
        header = json.loads(s.makefile("rb").readline())
    assert header["type"] == "info", header


def test_b_a_killed_box_loses_only_its_streams(
    rig: tuple[scaleout.HAProxy, dict[str, Daemon]],
) -> None:
    hx, daemons = rig
    r = scaleout.kill(hx, lambda: os.kill(daemons["box1"].proc.pid, signal.SIGKILL))
    show("kill", r)
    assert r["box1_streams"] >= 1, r
    # Every stream that box1 held is an error to its client: none ends as if whole.
    assert r["box1_streams_errored"] == r["box1_streams"], r
    assert r["box2_streams_whole"] == r["listeners"]["sent"] - r["box1_streams"], r
    assert r["new"]["errors"] == 0 and r["new"]["busy"] == 0, r
    assert r["new"]["served"] == {"box2": r["new"]["sent"]}, r
    assert r["marked_down_s"] < 10.0, r
