"""Whole HTTP replies: made before their first byte leaves, bounded, sent without copies.

A reply that is not streamed — ``"stream": false`` (a whole audio file with its real
lengths and a Content-Length), Kokoro's captioned speech as one JSON object, ``vtt`` /
``srt`` captions — is made in full first, so that its headers can say how long it is and
a failure or the bound is a clean JSON error rather than a cut transfer.

Bounds (``http.max_whole_audio_s``, 600 s by default: what a whole file is for, a prompt
or a clip, not an audiobook): the audio made, and the encoded bytes held, at most
:data:`BYTES_PER_S` a second of the bound (48 kHz 16-bit: only a WAV with a
``sample_rate`` above that reaches it first).  The audio length is not known before it is
made, so the bound is checked chunk by chunk: passing it stops the synthesis at once and
answers 400 ``text_too_long``, before any byte was sent.

Memory: the encoded file once (an ``io.BytesIO`` the encoder writes into), the words, and
one piece in flight: the JSON's base64 is made :data:`PIECE` bytes at a time as it is
written, never whole.  Writes go through the doors' one too-slow rule.  Nothing outlives
the reply.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

from appliance.errors import ErrorCode, ServiceError

BYTES_PER_S = 96_000
"""Encoded bytes a whole reply may hold per second of the bound (48 kHz 16-bit)."""

PIECE = 3 * 16384
"""Bytes of audio per write (a multiple of 3: each piece's base64 stands alone)."""


class Bound:
    """The audio a whole reply has made, against ``limit_s``."""

    def __init__(self, limit_s: float, voice_rate: int) -> None:
        self.limit_s = limit_s
        self.voice_rate = voice_rate
        self.samples = 0

    def add(self, samples: int, held_bytes: int) -> None:
        """Count one chunk (``samples`` at the voice's rate) with the bytes held so far;
        ServiceError ``text_too_long`` once either is past the bound."""
        self.samples += samples
        if self.samples > self.limit_s * self.voice_rate or held_bytes > self.limit_s * BYTES_PER_S:
            raise ServiceError(
                ErrorCode.TEXT_TOO_LONG,
                f"a whole reply holds at most {self.limit_s:g} s of audio"
                " (http.max_whole_audio_s) and this text makes more: stream it"
                ' ("stream": true) or send less',
            )


def file_pieces(buf: io.BytesIO) -> tuple[int, Iterator[bytes]]:
    """The whole file in ``buf``: its length, and its bytes a piece at a time."""
    size = buf.getbuffer().nbytes

    def pieces() -> Iterator[bytes]:
        with buf.getbuffer() as view:
            for at in range(0, size, PIECE):
                yield bytes(view[at : at + PIECE])

    return size, pieces()


def captioned_json(
    buf: io.BytesIO,
    fmt: str,
    timestamps: list[dict[str, Any]],
    visemes: dict[str, Any] | None = None,
) -> tuple[int, Iterator[bytes]]:
    """Kokoro's captioned speech as one JSON object, ``{"audio": base64, "audio_format",
    "timestamps"}`` (and ttsd's ``visemes`` when asked): its length, and its bytes with
    the base64 made a piece at a time."""
    size = buf.getbuffer().nbytes
    head = b'{"audio": "'
    more = f', "visemes": {json.dumps(visemes)}' if visemes is not None else ""
    tail = (
        f'", "audio_format": {json.dumps(fmt)}, "timestamps": {json.dumps(timestamps)}{more}}}'
    ).encode()

    def pieces() -> Iterator[bytes]:
        yield head
        with buf.getbuffer() as view:
            for at in range(0, size, PIECE):
                yield base64.b64encode(view[at : at + PIECE])
        yield tail

    return len(head) + 4 * -(-size // 3) + len(tail), pieces()
