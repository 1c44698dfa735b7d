"""The one use of soundfile's internals (appliance/doors/formats.set_ogg_page_latency)."""

from __future__ import annotations

import io

import numpy as np
import soundfile

from appliance.doors.formats import make_encoder, set_ogg_page_latency


def _ogg_pages(data: bytes) -> int:
    return data.count(b"OggS")


def test_short_ogg_pages_still_reach_libsndfile() -> None:
    """Fails if a soundfile release drops the internals the seam uses: Opus would then
    leave about once a second, not with each chunk."""
    with soundfile.SoundFile(
        io.BytesIO(), "w", samplerate=24000, channels=1, format="OGG", subtype="OPUS"
    ) as sound:
        assert set_ogg_page_latency(sound, 50.0)


def test_opus_audio_leaves_in_pages_of_about_fifty_ms() -> None:
    """Two seconds of speech-like audio in 100 ms chunks: with 1 s pages, about two pages
    come out; with 50 ms ones, dozens."""
    enc = make_encoder("opus", 22050)
    out = bytearray(enc.header())
    t = np.arange(2205, dtype=np.float32) / 22050
    for k in range(20):
        out += enc.encode((0.3 * np.sin(2 * np.pi * (200 + 10 * k) * t)).astype(np.float32))
    out += enc.finish()
    assert _ogg_pages(bytes(out)) >= 20
