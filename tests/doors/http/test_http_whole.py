"""Whole replies on the real daemon: ``"stream": false`` files with their real lengths, and
the bound every whole reply is made under (``http.max_whole_audio_s``)."""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import psutil
import pytest
import soundfile

from appliance.doors.formats import FORMATS
from tests.conftest import REPO, DaemonFactory
from tests.doors.http.conftest import HttpDaemon, start_http

TEXT = "A whole file says how long it is. Nothing about it is unknown."
ZERO = {"noise_scale": 0.0, "noise_w": 0.0}
"""No sampling noise: every rendering of TEXT has the same samples."""
UNREFUSED = {"admission_max_load": 8.0, "admission_backlog_ms": 600000}
"""Whole replies, not admission: a busy box must not refuse these daemons' requests."""


def post(
    d: HttpDaemon, body: dict[str, Any], path: str = "/v1/audio/speech"
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        d.base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture(scope="module")
def roomy(daemon_factory: DaemonFactory) -> HttpDaemon:
    """Whole replies of up to 20 minutes (115 MB held at most)."""
    limits = {"client_too_slow_s": 2.0, "max_output_buffer_bytes": 65536}
    return start_http(
        daemon_factory, {"max_whole_audio_s": 1200}, scheduler=UNREFUSED, limits=limits
    )


@pytest.fixture(scope="module")
def samples(roomy: HttpDaemon) -> int:
    """How many samples TEXT has at the voice's rate (22 050 Hz), streamed as pcm."""
    status, _, raw = post(roomy, {"input": TEXT, "response_format": "pcm", **ZERO})
    assert status == 200
    return len(raw) // 2


def riff_sizes(data: bytes) -> tuple[int, int, int]:
    """(RIFF size, data size, where the data begins), parsed chunk by chunk."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    (riff,) = struct.unpack("<I", data[4:8])
    at = 12
    while at + 8 <= len(data):
        tag, size = data[at : at + 4], struct.unpack("<I", data[at + 4 : at + 8])[0]
        if tag == b"data":
            return riff, size, at + 8
        at += 8 + size + size % 2
    raise AssertionError("no data chunk")


@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_false_is_a_whole_file_with_its_real_length(
    roomy: HttpDaemon, samples: int, fmt: str
) -> None:
    """A WAV said 0xFFFFFFFF and a FLAC "total unknown"; no Content-Length."""
    status, headers, data = post(
        roomy, {"input": TEXT, "response_format": fmt, "stream": False, **ZERO}
    )
    assert status == 200, data[:300]
    assert int(headers["Content-Length"]) == len(data)
    assert "Transfer-Encoding" not in headers
    rate = int(headers["X-Sample-Rate"])
    expected = samples * rate / 22050  # (G.711 is 8000 Hz, Opus 24000 Hz)
    if fmt in ("pcm", "mulaw", "alaw"):
        frames = len(data) // (2 if fmt == "pcm" else 1)
    else:
        if fmt.startswith("wav"):
            riff, size, start = riff_sizes(data)
            assert riff == len(data) - 8
            assert start + size + size % 2 == len(data)
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            assert f.samplerate == rate
            frames = f.frames
            assert len(f.read(dtype="int16")) == frames  # the samples are all there
    assert abs(frames - expected) <= 2, (frames, expected)


def test_the_telephony_prompt_file_has_its_real_length(roomy: HttpDaemon) -> None:
    """docs/telephony.md's command for a prompt file (hold.wav) gave a WAV whose sizes
    said 0xFFFFFFFF: sox read it as 149 hours long."""
    doc = (REPO / "docs/telephony.md").read_text()
    (cmd,) = [line for line in doc.splitlines() if "hold.wav" in line]
    words = shlex.split(cmd.split("#")[0])
    body = json.loads(words[words.index("-d") + 1])
    status, headers, data = post(roomy, body)
    assert status == 200 and headers["Content-Type"] == "audio/wav"
    assert int(headers["Content-Length"]) == len(data)
    riff, size, start = riff_sizes(data)
    assert (riff, start + size + size % 2) == (len(data) - 8, len(data))
    ftag, _, rate, _, _, bits = struct.unpack("<HHIIHH", data[20:36])
    assert (ftag, rate, bits) == (6, 8000, 8)  # A-law at 8 kHz, a byte a sample
    with soundfile.SoundFile(io.BytesIO(data)) as f:
        assert f.subtype == "ALAW" and f.frames == size
    assert 0.3 < size / 8000 < 10  # "Please hold.": not 149 hours


def test_openai_client_gets_a_whole_file(roomy: HttpDaemon, samples: int) -> None:
    client = openai.OpenAI(base_url=roomy.v1, api_key="unused", max_retries=0, timeout=60)
    resp = client.audio.speech.create(
        model="tts-1",
        voice="alloy",
        input=TEXT,
        response_format="flac",
        extra_body={"stream": False, **ZERO},
    )
    assert int(resp.response.headers["content-length"]) == len(resp.content)
    with soundfile.SoundFile(io.BytesIO(resp.content)) as f:
        assert f.frames == samples
        assert len(f.read(dtype="int16")) == samples


@pytest.mark.parametrize(
    ("extra", "param"), [({"stream_format": "sse"}, "stream_format"), ({"pace_ms": 20}, "pace_ms")]
)
def test_a_whole_file_does_not_stream(roomy: HttpDaemon, extra: dict[str, Any], param: str) -> None:
    body = {"input": TEXT, "response_format": "wav", "stream": False, **extra}
    status, _, raw = post(roomy, body)
    assert status == 400
    assert json.loads(raw)["error"]["param"] == param


@pytest.fixture(scope="module")
def capped(daemon_factory: DaemonFactory) -> HttpDaemon:
    return start_http(daemon_factory, {"max_whole_audio_s": 4}, scheduler=UNREFUSED)


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/v1/audio/speech", {"response_format": "wav", "stream": False}),
        ("/v1/audio/speech", {"response_format": "vtt"}),
        ("/dev/captioned_speech", {"response_format": "wav", "stream": False}),
    ],
)
def test_a_whole_reply_past_the_bound_is_refused(
    capped: HttpDaemon, path: str, extra: dict[str, Any]
) -> None:
    """Four seconds of audio at most (configured): more is a 400 before any byte of it."""
    long = "This sentence makes a few seconds of audio on its own. " * 4
    status, _, raw = post(capped, {"input": long, **extra}, path)
    assert status == 400, raw[:300]
    err = json.loads(raw)["error"]
    assert (err["code"], err["param"]) == ("text_too_long", "input")
    assert re.search(r"at most 4 s of audio \(http\.max_whole_audio_s\)", err["message"])
    # Within the bound, or streamed, the same door serves it.
    assert post(capped, {"input": "Short.", **extra}, path)[0] == 200
    assert post(capped, {"input": long, "response_format": "wav"})[0] == 200


class PeakRss:
    """The daemon's resident memory, polled every 5 ms: its peak over a base."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.base = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.005):
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:  # the daemon is gone: the test says why
                return

    def growth_mb(self) -> float:
        self._stop.set()
        self._thread.join()
        return (self.peak - self.base) / 1e6


def test_a_big_whole_reply_is_held_once(roomy: HttpDaemon) -> None:
    """Kokoro's captioned JSON was the audio, its base64, the JSON and the response at once:
    31 minutes of 22 kHz WAV (103 MB of JSON) took +368 MB.  Here two minutes at 192 kHz,
    46 MB of WAV and 61 MB of JSON, grow the daemon by less than 150 MB (about the WAV)."""
    body = {"input": "1234567 " * 32, "response_format": "wav", "sample_rate": 192000}
    body |= {"stream": False, **ZERO}
    post(roomy, {**body, "input": "Warm up."}, "/dev/captioned_speech")
    rss = PeakRss(roomy.daemon.proc.pid)
    t0 = time.monotonic()
    status, headers, raw = post(roomy, body, "/dev/captioned_speech")
    growth = rss.growth_mb()
    assert status == 200, raw[:300]
    assert int(headers["Content-Length"]) == len(raw)
    reply = json.loads(raw)
    wav = base64.b64decode(reply["audio"])
    with soundfile.SoundFile(io.BytesIO(wav)) as f:
        assert f.samplerate == 192000 and f.frames > 90 * 192000, f.frames
    assert reply["timestamps"][-1]["end_time"] > 90
    assert growth < 150, (
        f"+{growth:.0f} MB for {len(raw) / 1e6:.0f} MB ({time.monotonic() - t0:.0f} s)"
    )


def metric(d: HttpDaemon, line_start: str) -> float:
    with urllib.request.urlopen(d.base + "/metrics", timeout=30) as r:
        lines = r.read().decode().splitlines()
    return next((float(x.split()[-1]) for x in lines if x.startswith(line_start)), 0.0)


def test_a_whole_reply_nobody_reads_is_cut_off(roomy: HttpDaemon) -> None:
    """The held file is let go: a client that reads none of it is cut off after
    ``limits.client_too_slow_s`` (2 s here), counted, and its connection reset."""
    slow = 'ttsd_errors_total{code="client_too_slow"}'
    before = metric(roomy, slow)
    body = {"input": TEXT * 4, "response_format": "wav", "sample_rate": 48000, "stream": False}
    data = json.dumps(body).encode()
    host, port = roomy.base.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
        sock.connect((host, int(port)))
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        deadline = time.monotonic() + 120
        while metric(roomy, slow) < before + 1:
            assert time.monotonic() < deadline, "the client that reads nothing was never cut off"
            time.sleep(0.5)
        sock.settimeout(30)
        with pytest.raises(ConnectionResetError):
            while sock.recv(65536):
                pass
    assert roomy.daemon.alive()
