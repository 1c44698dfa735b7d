"""``speak`` with SSML marks: ``mark {name}`` events as the device plays each mark's sample."""

from __future__ import annotations

import time
from typing import Any

from bench.pulsesink import PulseServer
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire

SSML = (
    '<speak><mark name="a"/>The kitchen door is open. <mark name="b"/>Please close it.'
    '<break time="400ms"/><mark name="c"/>Thank you.<mark name="end"/></speak>'
)


def test_marks_are_reported_when_played(
    pulse_server: PulseServer, daemon_factory: DaemonFactory
) -> None:
    pulse_server.launch()
    d: Daemon = daemon_factory(
        {"playback": {"enabled": True, "latency": 0.02, "sample_rate": pulse_server.rate}},
        env=pulse_server.env,
    )
    opts: dict[str, Any] = {"text_format": "ssml", "noise_scale": 0, "noise_w": 0}
    with Wire(d.socket) as w:
        deadline = time.monotonic() + 30
        while w.call({"op": "health", "id": 99})["status"] != "ok":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        w.send({"op": "synthesize", "id": 1, "text": SSML, "format": "f32le", **opts})
        offsets = {
            m["name"]: m["offset_ms"]
            for e in w.until(1)
            if e["event"] == "chunk"
            for m in e.get("marks", [])
        }
        w.send({"op": "speak", "id": 2, "text": SSML, **opts})
        seen: list[tuple[str, float, dict[str, Any]]] = []
        while True:  # one by one: the arrival time is what is tested
            e = w.recv(timeout=30)
            assert e is not None
            if e.get("id") != 2:
                continue
            seen.append((e["event"], time.monotonic(), e))
            if e["event"] in ("end", "error"):
                break
    kinds = [k for k, _, _ in seen]
    assert kinds == ["queued", "started", "mark", "mark", "mark", "mark", "end"], kinds
    names = [e["name"] for k, _, e in seen if k == "mark"]
    assert names == ["a", "b", "c", "end"]
    # Each arrives when its sample plays: relative to the first mark (the first sample),
    # as far into the speech as its offset says.  Never early; late only by the gaps the
    # player counted as underruns (a busy machine can starve the device: then the sample,
    # and rightly its mark, plays later).
    end = seen[-1][2]
    underruns = end["stats"].get("underruns", 0)
    times = {e["name"]: t for k, t, e in seen if k == "mark"}
    for name in ("b", "c", "end"):
        heard_ms = (times[name] - times["a"]) * 1000
        assert heard_ms > offsets[name] - 60, (name, heard_ms, offsets[name])
        if underruns == 0:
            assert heard_ms < offsets[name] + 150, (name, heard_ms, offsets[name])
