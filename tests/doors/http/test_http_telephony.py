"""HTTP's G.711 and pacing extensions on the real daemon: raw μ-law / A-law, WAV with a
G.711 format tag, ``sample_rate`` and ``pace_ms`` in the body."""

from __future__ import annotations

import asyncio
import io
import struct
import time
import warnings

import aiohttp
import numpy as np
import pytest
import soundfile

from tests.asr import recognize, word_errors
from tests.doors.http.conftest import HttpDaemon

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

TEXT = "Please hold while we connect your call to the next available agent."
ZERO = {"noise_scale": 0.0, "noise_w": 0.0}
"""The same audio every run, so the recogniser's verdict is too."""


async def _post(
    d: HttpDaemon, body: dict[str, object]
) -> tuple[int, dict[str, str], list[tuple[float, bytes]]]:
    """Status, headers and the body's pieces as they arrived (time, bytes)."""
    async with aiohttp.ClientSession() as s:
        async with s.post(d.v1 + "/audio/speech", json={"input": TEXT, **body}) as resp:
            pieces: list[tuple[float, bytes]] = []
            async for data, _ in resp.content.iter_chunks():
                if data:
                    pieces.append((time.monotonic(), data))
            return resp.status, dict(resp.headers), pieces


def post(d: HttpDaemon, **body: object) -> tuple[int, dict[str, str], list[tuple[float, bytes]]]:
    return asyncio.run(_post(d, body))


@pytest.mark.parametrize("fmt", ["mulaw", "alaw"])
def test_raw_g711(http_daemon: HttpDaemon, fmt: str) -> None:
    status, headers, pieces = post(http_daemon, response_format=fmt, **ZERO)
    assert status == 200
    assert headers["Content-Type"] == ("audio/PCMU" if fmt == "mulaw" else "audio/PCMA")
    assert headers["X-Sample-Rate"] == "8000"
    data = b"".join(p for _, p in pieces)
    lin = audioop.ulaw2lin(data, 2) if fmt == "mulaw" else audioop.alaw2lin(data, 2)
    pcm = np.frombuffer(lin, np.int16)
    assert 2.0 < len(pcm) / 8000 < 8.0
    errors, n = word_errors(TEXT, recognize(pcm, 8000))
    assert errors <= n // 3, (errors, n)


@pytest.mark.parametrize(("fmt", "tag"), [("wav_mulaw", 7), ("wav_alaw", 6)])
def test_wav_g711(http_daemon: HttpDaemon, fmt: str, tag: int) -> None:
    status, headers, pieces = post(http_daemon, response_format=fmt, sample_rate=16000, **ZERO)
    assert status == 200 and headers["Content-Type"] == "audio/wav"
    data = b"".join(p for _, p in pieces)
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    ftag, channels, rate, byte_rate, align, bits = struct.unpack("<HHIIHH", data[20:36])
    assert (ftag, channels, rate, byte_rate, align, bits) == (tag, 1, 16000, 16000, 1, 8)
    # libsndfile reads it as the G.711 WAV it is.
    with soundfile.SoundFile(io.BytesIO(data)) as f:
        assert f.subtype == ("ULAW" if tag == 7 else "ALAW") and f.samplerate == 16000
        pcm = f.read(dtype="int16")
    errors, n = word_errors(TEXT, recognize(pcm, 16000))
    assert errors <= n // 3, (errors, n)


def test_paced_http(http_daemon: HttpDaemon) -> None:
    """Frames of 160 bytes every 20 ms, after the start buffer: the body arrives on the
    clock (generous bounds; the jitter figure is the bench's)."""
    status, _, pieces = post(http_daemon, response_format="mulaw", pace_ms=20)
    assert status == 200
    data = b"".join(p for _, p in pieces)
    assert len(data) % 160 == 0
    audio_s = len(data) / 8000
    span = pieces[-1][0] - pieces[0][0]
    assert audio_s - 0.04 - 0.3 < span < audio_s + 1.5, (span, audio_s)


@pytest.mark.parametrize(
    "body",
    [
        {"response_format": "mp3", "pace_ms": 20},
        {"response_format": "mulaw", "pace_ms": 1},
        {"response_format": "mulaw", "pace_ms": 20.5},
        {"response_format": "opus", "sample_rate": 8000},
        {"response_format": "pcm", "sample_rate": 100},
        {"response_format": "ulaw"},
    ],
)
def test_bad_extensions(http_daemon: HttpDaemon, body: dict[str, object]) -> None:
    status, _, pieces = post(http_daemon, **body)
    assert status == 400, b"".join(p for _, p in pieces)
