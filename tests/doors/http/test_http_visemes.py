"""Visemes on the HTTP door (``visemes: true``, a ttsd extension): SSE events, Kokoro's
captioned speech (NDJSON lines, or the whole reply's JSON), refused where nothing could
carry them."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

import pytest

from appliance.clients.client import Client
from tests.doors.http.conftest import HttpDaemon
from tests.doors.http.test_http_word_timings import post

TEXT = "Map the road. Then go home, and rest!"
ZERO = {"noise_scale": 0.0, "noise_w": 0.0}


def v1_visemes(d: HttpDaemon) -> tuple[dict[str, list[Any]], float]:
    """The v1 door's visemes for TEXT (chunks joined) and its audio's length in ms."""
    with Client(d.daemon.socket) as c:
        chunks = [e for e in c.synthesize(TEXT, visemes=True, **ZERO) if e["event"] == "chunk"]
    joined: dict[str, list[Any]] = {"viseme": [], "offset_ms": [], "duration_ms": []}
    for c in chunks:
        for key in joined:
            joined[key] += c["visemes"][key]
    return joined, sum(c["duration_ms"] for c in chunks)


def assert_tiles(shapes: dict[str, list[Any]], audio_ms: float) -> None:
    offsets, durations = shapes["offset_ms"], shapes["duration_ms"]
    assert len(shapes["viseme"]) == len(offsets) == len(durations) > 10
    assert offsets[0] == 0.0 and all(a < b for a, b in itertools.pairwise(offsets))
    for at, d, nxt in zip(offsets, durations, [*offsets[1:], audio_ms], strict=True):
        assert at + d == pytest.approx(nxt, abs=2e-3)


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_sse_carries_a_visemes_event_per_chunk(http_daemon: HttpDaemon, fmt: str) -> None:
    body = {"input": TEXT, "voice": "alloy", "response_format": fmt, "stream_format": "sse"}
    status, ctype, raw = post(http_daemon, "/v1/audio/speech", {**body, **ZERO, "visemes": True})
    assert status == 200 and ctype.startswith("text/event-stream")
    events = [json.loads(x[6:]) for x in raw.decode().split("\n") if x.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and "ttsd.speech.word" not in kinds
    got: dict[str, list[Any]] = {"viseme": [], "offset_ms": [], "duration_ms": []}
    for e in events:
        if e["type"] == "ttsd.speech.visemes":
            for key in got:
                got[key] += e[key]
    want, audio_ms = v1_visemes(http_daemon)
    assert_tiles(got, audio_ms)
    assert got == want  # the same shapes as the v1 door's, cut at the same chunks
    status, _, plain = post(http_daemon, "/v1/audio/speech", {**body, **ZERO})
    assert status == 200 and b"ttsd.speech.visemes" not in plain  # off by default


def test_captioned_speech_carries_visemes_streamed_and_whole(http_daemon: HttpDaemon) -> None:
    want, audio_ms = v1_visemes(http_daemon)
    body = {"input": TEXT, "voice": "alloy", "response_format": "pcm", "visemes": True, **ZERO}
    status, _, raw = post(http_daemon, "/dev/captioned_speech", body)
    assert status == 200
    lines = [json.loads(line) for line in raw.decode().splitlines()]
    got: dict[str, list[Any]] = {"viseme": [], "offset_ms": [], "duration_ms": []}
    for line in lines:
        for key in got:
            got[key] += line["visemes"][key]
    assert_tiles(got, audio_ms)
    assert got == want
    pcm = b"".join(base64.b64decode(line["audio"]) for line in lines)
    assert len(pcm) / 2 / 22050 * 1000 == pytest.approx(audio_ms, abs=0.1)
    status, _, raw = post(http_daemon, "/dev/captioned_speech", {**body, "stream": False})
    assert status == 200
    reply = json.loads(raw)
    assert reply["visemes"] == want
    assert "visemes" not in json.loads(
        post(http_daemon, "/dev/captioned_speech", {**body, "stream": False, "visemes": False})[2]
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"visemes": "yes"},
        {"visemes": True},  # plain audio: nothing to carry them
        {"visemes": True, "stream_format": "sse", "pace_ms": 20},
        {"visemes": True, "response_format": "vtt"},
    ],
)
def test_visemes_where_nothing_carries_them_are_refused(
    http_daemon: HttpDaemon, extra: dict[str, Any]
) -> None:
    body = {"input": "Hello.", "voice": "alloy", "response_format": "pcm", **extra}
    status, _, raw = post(http_daemon, "/v1/audio/speech", body)
    assert status == 400, raw
    assert json.loads(raw)["error"]["param"] == "visemes"
