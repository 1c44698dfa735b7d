"""Word timings on the HTTP door: Kokoro-FastAPI's ``/dev/captioned_speech`` (one JSON, or
NDJSON lines while it is made) and ``response_format: vtt | srt`` on ``/v1/audio/speech``."""

from __future__ import annotations

import base64
import itertools
import json
import re
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

from appliance.clients.client import Client
from tests.doors.http.conftest import HttpDaemon, decode

TEXT = "It costs $49.95 today, Dr. Smith. The museum opens at nine! Is that late?"
ZERO = {"noise_scale": 0.0, "noise_w": 0.0}


def post(d: HttpDaemon, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    req = urllib.request.Request(
        d.base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def v1_words(d: HttpDaemon, text: str) -> list[dict[str, Any]]:
    with Client(d.daemon.socket) as c:
        events = list(c.synthesize(text, word_timings=True, **ZERO))
    return [w for e in events if e["event"] == "chunk" for w in e["words"]]


def test_captioned_speech_is_kokoros_json_with_the_v1_timings(http_daemon: HttpDaemon) -> None:
    body = {"input": TEXT, "voice": "alloy", "response_format": "wav", "stream": False, **ZERO}
    status, ctype, raw = post(http_daemon, "/dev/captioned_speech", body)
    assert status == 200 and ctype.startswith("application/json"), raw[:200]
    reply = json.loads(raw)
    assert reply["audio_format"] == "wav"
    audio, rate = decode(base64.b64decode(reply["audio"]), "wav")
    assert rate == 22050 and len(audio) > rate
    stamps = reply["timestamps"]
    words = v1_words(http_daemon, TEXT)
    assert [s["word"] for s in stamps] == [TEXT[a:b] for a, b in (w["text_span"] for w in words)]
    assert "$49.95" in [s["word"] for s in stamps]
    for s, w in zip(stamps, words, strict=True):
        assert abs(s["start_time"] - w["offset_ms"] / 1000) < 1e-3
        assert abs(s["end_time"] - (w["offset_ms"] + w["duration_ms"]) / 1000) < 1e-3
        assert s["text_span"] == w["text_span"]
    assert stamps[-1]["end_time"] <= len(audio) / rate


def test_captioned_speech_streams_ndjson_lines(http_daemon: HttpDaemon) -> None:
    body = {"input": TEXT, "voice": "alloy", "response_format": "pcm", **ZERO}  # stream: default
    status, ctype, raw = post(http_daemon, "/dev/captioned_speech", body)
    assert status == 200 and ctype.startswith("application/x-ndjson")
    lines = [json.loads(line) for line in raw.decode().splitlines()]
    assert len(lines) > 2
    pcm = b"".join(base64.b64decode(line["audio"]) for line in lines)
    stamps = [s for line in lines for s in line["timestamps"]]
    assert [s["text_span"] for s in stamps] == [w["text_span"] for w in v1_words(http_daemon, TEXT)]
    assert stamps[-1]["end_time"] <= len(pcm) / 2 / 22050


CLOCK = r"(\d\d):(\d\d):(\d\d)[.,](\d\d\d)"


def seconds(m: tuple[str, ...]) -> float:
    h, mi, s, ms = (int(x) for x in m)
    return h * 3600 + mi * 60 + s + ms / 1000


def test_webvtt_and_srt_have_a_cue_per_sentence(http_daemon: HttpDaemon) -> None:
    body = {"input": TEXT, "voice": "alloy", **ZERO}
    status, ctype, vtt = post(http_daemon, "/v1/audio/speech", {**body, "response_format": "vtt"})
    assert status == 200 and ctype.startswith("text/vtt")
    text = vtt.decode()
    assert text.startswith("WEBVTT\n\n")
    cues = re.findall(CLOCK + " --> " + CLOCK + r"\n(.+)\n", text)
    assert [c[8] for c in cues] == [
        "It costs $49.95 today, Dr. Smith.",
        "The museum opens at nine!",
        "Is that late?",
    ]
    times = [(seconds(c[:4]), seconds(c[4:8])) for c in cues]
    words = v1_words(http_daemon, TEXT)
    assert abs(times[0][0] - words[0]["offset_ms"] / 1000) <= 1e-3
    assert all(a < b for a, b in times)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(times))
    status, ctype, srt = post(http_daemon, "/v1/audio/speech", {**body, "response_format": "srt"})
    assert status == 200 and ctype.startswith("application/x-subrip")
    blocks = srt.decode().strip().split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["1", "2", "3"]
    assert [b.splitlines()[2] for b in blocks] == [c[8] for c in cues]
    assert [b.splitlines()[1].replace(",", ".") for b in blocks] == re.findall(
        r"\d\d:\d\d:\d\d\.\d\d\d --> \d\d:\d\d:\d\d\.\d\d\d", text
    )


def test_plain_speech_is_unchanged_and_bad_caption_fields_are_refused(
    http_daemon: HttpDaemon,
) -> None:
    body = {"input": "Hello there.", "voice": "alloy", "response_format": "pcm", **ZERO}
    status, ctype, raw = post(http_daemon, "/v1/audio/speech", body)
    assert status == 200 and ctype.startswith("audio/pcm") and len(raw) > 1000
    assert np.frombuffer(raw, dtype="<i2").any()
    for bad in ({"response_format": "vtt"}, {"stream": "yes"}):
        status, _, raw = post(http_daemon, "/dev/captioned_speech", {**body, **bad})
        assert status == 400, raw
        assert json.loads(raw)["error"]["param"] in ("response_format", "stream")


def test_sse_carries_word_events_when_asked(http_daemon: HttpDaemon) -> None:
    body = {"input": TEXT, "voice": "alloy", "response_format": "pcm", "stream_format": "sse"}
    status, ctype, raw = post(
        http_daemon, "/v1/audio/speech", {**body, **ZERO, "word_timings": True}
    )
    assert status == 200 and ctype.startswith("text/event-stream")
    events = [
        json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: ")
    ]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and "speech.audio.delta" in kinds
    words = [e for e in events if e["type"] == "ttsd.speech.word"]
    assert [w["text_span"] for w in words] == [w["text_span"] for w in v1_words(http_daemon, TEXT)]
    # Each word after the audio it starts in: the audio before it reaches its start.
    pcm = 0
    for e in events:
        if e["type"] == "speech.audio.delta":
            pcm += len(base64.b64decode(e["audio"])) // 2
        elif e["type"] == "ttsd.speech.word":
            assert e["start_time"] * 22050 < pcm
    status, _, plain = post(http_daemon, "/v1/audio/speech", {**body, **ZERO})
    assert status == 200 and b"ttsd.speech.word" not in plain


@pytest.mark.parametrize("kind", ["sse", "ndjson"])
def test_paced_responses_carry_every_word_once_with_its_frame(
    http_daemon: HttpDaemon, kind: str
) -> None:
    """Issue 42 item 14: paced (``pace_ms``) SSE and NDJSON delivered 2-3 of 4 words (the
    next chunk, made ahead of the clock, overwrote them).  Every word comes once, with the
    frame whose span [k·N, (k+1)·N) holds its start."""
    body = {"input": TEXT, "voice": "alloy", "response_format": "pcm", "pace_ms": 20, **ZERO}
    if kind == "sse":
        path, body = "/v1/audio/speech", {**body, "stream_format": "sse", "word_timings": True}
    else:
        path = "/dev/captioned_speech"
    status, _, raw = post(http_daemon, path, body)
    assert status == 200, raw[:200]
    frames: list[list[dict[str, Any]]] = []  # each frame's words, in order
    if kind == "sse":
        for line in raw.decode().split("\n"):
            if line.startswith("data: "):
                e = json.loads(line[6:])
                if e["type"] == "speech.audio.delta":
                    assert len(base64.b64decode(e["audio"])) == 441 * 2  # 20 ms at 22 050 Hz
                    frames.append([])
                elif e["type"] == "ttsd.speech.word":
                    frames[-1].append(e)
    else:
        for line in raw.decode().splitlines():
            obj = json.loads(line)
            assert len(base64.b64decode(obj["audio"])) == 441 * 2
            frames.append(obj["timestamps"])
    got = [(k, w) for k, words in enumerate(frames) for w in words]
    assert [w["text_span"] for _, w in got] == [w["text_span"] for w in v1_words(http_daemon, TEXT)]
    for k, w in got:
        assert k * 0.02 <= w["start_time"] + 1e-3 < (k + 1) * 0.02 + 2e-3, (k, w)


def test_webvtt_escapes_a_markdown_reference_once(http_daemon: HttpDaemon) -> None:
    """A Markdown source's "&amp;" (an ampersand) showed as "&amp;amp;" in its cue."""
    src = "Salt &amp; pepper, please."
    body = {"input": src, "text_format": "markdown", **ZERO}
    status, _, vtt = post(http_daemon, "/v1/audio/speech", {**body, "response_format": "vtt"})
    assert status == 200
    assert vtt.decode().split("\n")[3] == "Salt &amp; pepper, please."
    status, _, raw = post(http_daemon, "/v1/audio/speech", {**body, "response_format": "srt"})
    assert raw.decode().split("\n")[2] == "Salt & pepper, please."
