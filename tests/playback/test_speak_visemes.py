"""``speak`` with ``visemes`` on a PulseAudio null sink: a ``viseme`` event as each mouth
shape starts to play, the same shapes, in the same order, as ``synthesize`` gives."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import Daemon
from tests.wire import Wire

# Checked against the device's clock, as tests/playback/test_speak_words.py: alone.
pytestmark = pytest.mark.solo

TEXT = "Close the door, then open the window."
ZERO = {"noise_scale": 0, "noise_w": 0}
SLACK_MS = 120.0
"""The sink's latency, the poll and the socket between the daemon's clock and ours."""


def shapes(w: Wire) -> list[tuple[int, float, float]]:
    """(viseme, offset_ms, duration_ms) of the text's chunks, from ``synthesize``."""
    w.send({"op": "synthesize", "id": 100, "text": TEXT, "visemes": True, **ZERO})
    out: list[tuple[int, float, float]] = []
    for e in w.until(100):
        if e["event"] == "chunk":
            v = e["visemes"]
            out += zip(v["viseme"], v["offset_ms"], v["duration_ms"], strict=True)
    return out


def test_visemes_are_reported_as_played(speaker_daemon: Daemon) -> None:
    with Wire(speaker_daemon.socket) as w:
        expected = shapes(w)
        w.send({"op": "speak", "id": 1, "text": TEXT, "visemes": True, **ZERO})
        got = w.until(1, ("started",))
        t_started = time.monotonic()
        reported: list[tuple[dict[str, Any], float]] = []
        while True:
            ev = w.recv(timeout=10.0)
            assert ev is not None and ev["id"] == 1, ev
            if ev["event"] != "viseme":
                break
            reported.append((ev, (time.monotonic() - t_started) * 1000))
    assert [e["event"] for e in got] == ["queued", "started"]
    assert ev["event"] == "end" and ev["cancelled"] is False, ev
    # Chunks may split a shape the whole reply keeps as one: compare shapes merged.
    merged = [v for k, (v, _, _) in enumerate(expected) if k == 0 or expected[k - 1][0] != v]
    said = [e["viseme"] for e, _ in reported]
    said = [v for k, v in enumerate(said) if k == 0 or said[k - 1] != v]
    assert said == merged
    total = sum(e["duration_ms"] for e, _ in reported)
    assert total == pytest.approx(sum(d for _, _, d in expected), abs=1.0)
    # Each one once its sound started (on the device's clock), never long before.
    offset_ms = 0.0
    for e, at_ms in reported:
        assert at_ms + SLACK_MS >= offset_ms, (e, at_ms, offset_ms)
        offset_ms += e["duration_ms"]


def test_without_visemes_speak_reports_none(speaker_daemon: Daemon) -> None:
    with Wire(speaker_daemon.socket) as w:
        w.send({"op": "speak", "id": 1, "text": "Close the door.", **ZERO})
        evs = w.until(1)
    assert [e["event"] for e in evs] == ["queued", "started", "end"]
