"""Float samples → the bytes a door sends: resampling (stateful across chunks) and format."""

from __future__ import annotations

import numpy as np
import soxr

from appliance.speech import FloatArray

PCM_FORMATS = ("s16le", "f32le")


class PcmEncoder:
    """Resample (seamless across chunks of one stream) and encode as s16le or f32le."""

    def __init__(self, in_rate: int, out_rate: int, fmt: str = "s16le") -> None:
        if fmt not in PCM_FORMATS:
            raise ValueError(f"unknown sample format {fmt!r}")
        self.in_rate, self.out_rate, self.fmt = in_rate, out_rate, fmt
        self._rs = (
            soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality="HQ")
            if in_rate != out_rate
            else None
        )

    def __call__(self, audio: FloatArray, last: bool = False) -> bytes:
        x = audio
        if self._rs is not None:
            x = np.asarray(self._rs.resample_chunk(x, last=last), dtype=np.float32)
        x = np.clip(x, -1.0, 1.0)
        if self.fmt == "f32le":
            return x.astype("<f4").tobytes()
        return (x * 32767.0).astype("<i2").tobytes()
