"""Float samples → the bytes a door sends: resampling (stateful across chunks) and format.

Formats: ``s16le``, ``f32le`` and G.711 (``mulaw``, ``alaw``: one byte a sample, made
from the same 16-bit samples ``s16le`` sends, by ITU-T G.711's segment encoding — the
reference C code's arithmetic, vectorised).  Telephony takes G.711 at 8000 Hz:
:func:`default_rate` is what a request that names no rate gets.  No state but the
resampler's; one encoder per stream.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import soxr

from appliance.speech import FloatArray

G711_FORMATS = ("mulaw", "alaw")
PCM_FORMATS = ("s16le", "f32le", *G711_FORMATS)

G711_RATE = 8000
"""What telephony speaks; G.711 without a ``sample_rate`` is sent at this rate."""

BYTES_PER_SAMPLE = {"s16le": 2, "f32le": 4, "mulaw": 1, "alaw": 1}

_ULAW_BIAS = 0x21
_ULAW_CLIP = 8159
_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], np.int32)
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], np.int32)


def default_rate(fmt: str, voice_rate: int) -> int:
    """The rate a stream in ``fmt`` is sent at when the request names none."""
    return G711_RATE if fmt in G711_FORMATS else voice_rate


def lin2ulaw(pcm: npt.NDArray[np.int16]) -> bytes:
    """16-bit linear → μ-law (G.711, 14-bit magnitude with bias 33, bits inverted)."""
    x = pcm.astype(np.int32) >> 2
    mask = np.where(x < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(x), _ULAW_CLIP) + _ULAW_BIAS
    seg = np.searchsorted(_ULAW_SEG_END, mag, side="left").astype(np.int32)
    byte = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | ((mag >> (seg + 1)) & 0x0F))
    return ((byte ^ mask) & 0xFF).astype(np.uint8).tobytes()


def lin2alaw(pcm: npt.NDArray[np.int16]) -> bytes:
    """16-bit linear → A-law (G.711, 13-bit, even bits inverted: XOR 0x55)."""
    x = pcm.astype(np.int32) >> 3
    neg = x < 0
    mask = np.where(neg, 0x55, 0xD5)
    mag = np.where(neg, -x - 1, x)
    seg = np.searchsorted(_ALAW_SEG_END, mag, side="left").astype(np.int32)
    shift = np.where(seg < 2, 1, seg)
    byte = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | ((mag >> shift) & 0x0F))
    return ((byte ^ mask) & 0xFF).astype(np.uint8).tobytes()


class PcmEncoder:
    """Resample (seamless across chunks of one stream) and encode in one of PCM_FORMATS."""

    def __init__(self, in_rate: int, out_rate: int, fmt: str = "s16le") -> None:
        if fmt not in PCM_FORMATS:
            raise ValueError(f"unknown sample format {fmt!r}")
        self.in_rate, self.out_rate, self.fmt = in_rate, out_rate, fmt
        self._rs = (
            soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality="HQ")
            if in_rate != out_rate
            else None
        )

    @property
    def bytes_per_sample(self) -> int:
        return BYTES_PER_SAMPLE[self.fmt]

    def __call__(self, audio: FloatArray, last: bool = False) -> bytes:
        x = audio
        if self._rs is not None:
            x = np.asarray(self._rs.resample_chunk(x, last=last), dtype=np.float32)
        x = np.clip(x, -1.0, 1.0)
        if self.fmt == "f32le":
            return x.astype("<f4").tobytes()
        s16 = (x * 32767.0).astype("<i2")
        if self.fmt == "mulaw":
            return lin2ulaw(s16)
        if self.fmt == "alaw":
            return lin2alaw(s16)
        return s16.tobytes()

    def silence(self, samples: int) -> bytes:
        """``samples`` of silence in this format (G.711's zero is not a zero byte)."""
        zero = np.zeros(samples, np.int16)
        if self.fmt == "mulaw":
            return lin2ulaw(zero)
        if self.fmt == "alaw":
            return lin2alaw(zero)
        return bytes(samples * self.bytes_per_sample)
