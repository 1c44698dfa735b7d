"""``ttsctl synth -o -``: a request's audio on standard output as it arrives.

WAV by default: a pipe cannot be rewound to fill in the lengths, so the header says
"unknown length" (0xFFFFFFFF, what the HTTP door streams and what aplay, sox, ffmpeg,
libsndfile and Python's ``wave`` read to the end); ``raw``: bare s16le mono, the rate said
on stderr before the first byte.  Each chunk is written and flushed when it comes, so
``ttsctl synth … -o - | aplay`` speaks while the rest is made.  A reader that goes away
raises BrokenPipeError out of :meth:`StdoutAudio.take` (ttsctl ends quietly:
:mod:`appliance.ops.pipes`).  Holds nothing but the encoder's state.
"""

from __future__ import annotations

import sys
from typing import Any, BinaryIO

import numpy as np

from appliance.doors.formats import Encoder, make_encoder


def status(line: str) -> None:
    """ttsctl's word about a synthesis: on stderr, never among the audio."""
    print(f"ttsctl: {line}", file=sys.stderr, flush=True)


class StdoutAudio:
    """Takes one request's events (audio in ``f32le``) and writes WAV or raw s16le."""

    def __init__(self, raw: bool, out: BinaryIO | None = None) -> None:
        self.raw = raw
        self.out = out if out is not None else sys.stdout.buffer
        self.encoder: Encoder | None = None
        self.samples = 0
        self.stats: dict[str, Any] = {}

    def take(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "start":
            self.encoder = make_encoder("pcm" if self.raw else "wav", int(ev["sample_rate"]))
            if self.raw:
                status(f"standard output: raw s16le mono at {self.encoder.sample_rate} Hz")
            self._write(self.encoder.header())
        elif kind == "chunk" and self.encoder is not None:
            samples = np.frombuffer(ev["audio"], dtype="<f4")
            self.samples += samples.size
            self._write(self.encoder.encode(samples))
        elif kind == "end":
            self.stats = dict(ev.get("stats") or {})

    def close(self) -> int:
        """Flush the encoder and say what was written; the exit status."""
        if self.encoder is None:
            return 1
        self._write(self.encoder.finish())
        rate = self.encoder.sample_rate
        kind = "raw s16le" if self.raw else "WAV"
        status(
            f"standard output: {kind}, {round(1000 * self.samples / rate)} ms of audio at"
            f" {rate} Hz, first packet after {self.stats.get('ttfp_ms')} ms"
        )
        return 0

    def _write(self, data: bytes) -> None:
        if data:
            self.out.write(data)
            self.out.flush()
