"""The HTTP door's small parts: listen addresses, loopback, the request body, encoders."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile

from appliance.doors.captions import CAPTION_FORMATS
from appliance.doors.formats import FORMATS, FileOut, WavOut, _Sink, make_encoder
from appliance.doors.http import SpeechBody
from appliance.doors.net import is_loopback, parse_listen
from appliance.errors import ServiceError


@pytest.mark.parametrize(
    ("listen", "want"),
    [
        ("127.0.0.1:8880", ("127.0.0.1", 8880)),
        ("[::1]:8880", ("::1", 8880)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_parse_listen(listen: str, want: tuple[str, int]) -> None:
    assert parse_listen(listen, "http listen address") == want


@pytest.mark.parametrize("bad", ["8880", ":8880", "host:", "host:port", "h:70000"])
def test_parse_listen_refuses(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_listen(bad, "http listen address")


def test_loopback() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.5", "box.local"]))


def test_body_defaults_and_round_trip() -> None:
    b = SpeechBody.from_dict({"input": "Hi.", "voice": {"id": "alloy"}, "speed": 3})
    assert (b.response_format, b.stream_format, b.voice, b.applied_speed()) == (
        "mp3",
        "audio",
        "alloy",
        3.0,  # past 2x time-stretched (libsonic), not clamped
    )
    assert SpeechBody.from_dict(b.to_dict()) == b
    assert SpeechBody.from_dict({"input": "x", "speed": 0.25}).applied_speed() == 0.5
    with pytest.raises(ServiceError):
        SpeechBody.from_dict({"input": "x", "speed": True})


def test_sink_keeps_rewrites_it_still_holds_and_drops_older_ones() -> None:
    s = _Sink()
    s.write(b"abcdef")
    s.seek(1)
    s.write(b"XY")  # not taken yet: rewritten in place
    assert s.take() == b"aXYdef"
    s.seek(0, 2)
    s.write(b"gh")
    s.seek(2)
    s.write(b"ZZZZZ")  # offsets 2-6: 2-5 were sent already, only 6 is still held
    assert s.take() == b"Zh"
    assert s.tell() == 7


def test_wav_header_says_unknown_length_and_decodes() -> None:
    enc = WavOut(16000)
    x = (0.5 * np.sin(np.arange(16000) / 5)).astype(np.float32)
    data = enc.header() + enc.encode(x[:8000]) + enc.encode(x[8000:], True) + enc.finish()
    assert data[4:8] == b"\xff\xff\xff\xff" and data[40:44] == b"\xff\xff\xff\xff"
    audio, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == 16000 and len(audio) == 16000


@pytest.mark.parametrize("fmt", ["mp3", "opus", "flac"])
def test_compressed_formats_emit_bytes_chunk_by_chunk(fmt: str) -> None:
    enc = make_encoder(fmt, 22050)
    x = (0.3 * np.sin(np.arange(22050 * 2) / 7)).astype(np.float32)
    sizes = [len(enc.header())]
    for i in range(0, len(x), 4410):  # 200 ms chunks
        sizes.append(len(enc.encode(x[i : i + 4410])))
    sizes.append(len(enc.finish()))
    # Audio leaves while it is made, not all at the end.
    assert sum(1 for n in sizes[1:-1] if n > 0) >= len(sizes[1:-1]) // 2, sizes
    assert sizes[-1] < sum(sizes) / 2, sizes


@pytest.mark.parametrize("fmt", ["wav", "wav_alaw", "flac", "mp3", "opus"])
def test_a_whole_file_has_its_real_length(fmt: str) -> None:
    """Into a seekable target the headers are rewritten: a G.711 WAV of odd length gets
    its pad byte, FLAC its total, MP3 its Info tag."""
    buf = io.BytesIO()
    out = FileOut(fmt, 22050, buf, 8000 if "law" in fmt else None)
    x = (0.3 * np.sin(np.arange(22050 * 2 + 3) / 7)).astype(np.float32)  # 16 001 at 8 kHz
    for i in range(0, len(x), 4410):
        out.write(x[i : i + 4410])
    out.finish()
    data = buf.getvalue()
    with soundfile.SoundFile(io.BytesIO(data)) as f:
        expected = len(x) * f.samplerate / 22050
        assert abs(f.frames - expected) <= 1, (f.frames, expected)
        assert len(f.read(dtype="int16")) == f.frames
    if fmt.startswith("wav"):
        start = data.index(b"data") + 8
        (riff,), (size,) = (
            struct.unpack("<I", data[4:8]),
            struct.unpack("<I", data[start - 4 : start]),
        )
        assert riff == len(data) - 8
        assert start + size + size % 2 == len(data)
        assert fmt == "wav" or size % 2  # (the odd case is exercised)


@pytest.mark.parametrize("fmt", ["aac", "ogg", "m4a", 7])
def test_an_unsupported_format_lists_every_supported_one(fmt: object) -> None:
    """'aac' listed 7 of the 11 formats, other names 9."""
    with pytest.raises(ServiceError) as exc:
        SpeechBody.from_dict({"input": "x", "response_format": fmt})
    listed = exc.value.message.rsplit("use one of ", 1)[1].split(", ")
    assert listed == [*FORMATS, *CAPTION_FORMATS]
