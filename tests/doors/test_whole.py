"""Whole replies' bytes: the length said before them is the length sent, made a piece at a
time, and the bound refuses past either limit."""

from __future__ import annotations

import base64
import io
import json

import pytest

from appliance.doors import whole
from appliance.errors import ErrorCode, ServiceError


@pytest.mark.parametrize("size", [0, 1, 2, 3, whole.PIECE - 1, whole.PIECE, 3 * whole.PIECE + 2])
def test_captioned_json_is_the_length_it_says_and_decodes(size: int) -> None:
    audio = bytes(range(256)) * (size // 256 + 1)
    buf = io.BytesIO(audio[:size])
    stamps = [{"word": 'say "hi"', "start_time": 0.0, "end_time": 0.25, "text_span": [0, 8]}]
    length, pieces = whole.captioned_json(buf, "wav", stamps)
    parts = list(pieces)
    body = b"".join(parts)
    assert len(body) == length
    assert max(len(p) for p in parts) <= 4 * whole.PIECE // 3  # never the whole base64
    reply = json.loads(body)
    assert base64.b64decode(reply["audio"]) == audio[:size]
    assert (reply["audio_format"], reply["timestamps"]) == ("wav", stamps)


def test_file_pieces_are_the_file() -> None:
    data = bytes(range(256)) * 1000
    length, pieces = whole.file_pieces(io.BytesIO(data))
    parts = list(pieces)
    assert length == len(data) and b"".join(parts) == data
    assert max(len(p) for p in parts) == whole.PIECE


def test_the_bound_counts_audio_and_bytes() -> None:
    b = whole.Bound(2.0, 22050)
    b.add(22050, 0)
    b.add(22050, 2 * whole.BYTES_PER_S)  # exactly at both limits: still within
    with pytest.raises(ServiceError) as exc:
        b.add(1, 0)
    assert exc.value.code == ErrorCode.TEXT_TOO_LONG
    assert "at most 2 s of audio (http.max_whole_audio_s)" in exc.value.message
    with pytest.raises(ServiceError):
        whole.Bound(2.0, 22050).add(10, 2 * whole.BYTES_PER_S + 1)  # 192 kHz WAV: bytes first
