"""Time-stretch past what a voice's own timing does well: libsonic through ctypes.

A VITS voice made faster by shortening its phonemes alone soon slurs: its phonemes run
down to a frame or two each (the bundled voice gives an id 1.8 frames on average), and
recognition suffers.  Measured (``python -m bench --only speeds``: README "Fast speech"):
at total speeds of 1.5–3×, the voice re-timed to 1.25× with the rest stretched is heard
best; at 1.5× it is heard a little worse, at 1.75–2× clearly worse.  Above
:data:`VOICE_SPEED_LIMIT` the voice renders at that speed and libsonic (what espeak-ng
uses for its high rates: pitch-synchronous overlap-add, pitch kept) makes up the rest.

:class:`Stretcher` is one stream's state: samples go in chunk by chunk and come out as
libsonic has them (it holds back a few pitch periods, ~20 ms, across chunks, so joins
are seamless: no clicks); :meth:`Stretcher.flush` at the end returns the rest.  One per
request, never shared between threads at once; :meth:`Stretcher.close` frees it (also
done when it is collected).  The library is Debian's ``libsonic0`` (``libsonic.so.0``),
loaded once per process on first use; without it :func:`available` is False and speeds
above the limit are refused (the doors say so).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading

import numpy as np

from appliance.speech import MAX_SPEED, FloatArray

VOICE_SPEED_LIMIT = 1.25
"""The fastest speed asked of the voice itself; beyond it libsonic stretches the rest."""
__all__ = ["MAX_SPEED", "VOICE_SPEED_LIMIT", "Stretcher", "available", "split_speed"]

_LIB_NAMES = ("libsonic.so.0", "sonic")


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    for name in _LIB_NAMES:
        path = name if name.endswith(".0") else ctypes.util.find_library(name)
        if not path:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        vp, f, i = ctypes.c_void_p, ctypes.c_float, ctypes.c_int
        fp = ctypes.POINTER(ctypes.c_float)
        lib.sonicCreateStream.argtypes, lib.sonicCreateStream.restype = [i, i], vp
        lib.sonicDestroyStream.argtypes, lib.sonicDestroyStream.restype = [vp], None
        lib.sonicSetSpeed.argtypes, lib.sonicSetSpeed.restype = [vp, f], None
        lib.sonicSetQuality.argtypes, lib.sonicSetQuality.restype = [vp, i], None
        lib.sonicWriteFloatToStream.argtypes, lib.sonicWriteFloatToStream.restype = [vp, fp, i], i
        lib.sonicReadFloatFromStream.argtypes, lib.sonicReadFloatFromStream.restype = [vp, fp, i], i
        lib.sonicFlushStream.argtypes, lib.sonicFlushStream.restype = [vp], i
        lib.sonicSamplesAvailable.argtypes, lib.sonicSamplesAvailable.restype = [vp], i
        return lib
    return None


def available() -> bool:
    """Whether libsonic can be loaded (speeds above :data:`VOICE_SPEED_LIMIT` need it)."""
    return _lib() is not None


def split_speed(speed: float) -> tuple[float, float]:
    """(the voice's speed, the stretch factor): their product is ``speed``."""
    if speed <= VOICE_SPEED_LIMIT:
        return speed, 1.0
    return VOICE_SPEED_LIMIT, speed / VOICE_SPEED_LIMIT


class Stretcher:
    """One stream's libsonic state (see the module doc)."""

    def __init__(self, sample_rate: int, factor: float) -> None:
        lib = _lib()
        if lib is None:
            raise RuntimeError("libsonic (libsonic.so.0) is not installed")
        self._lib = lib
        self._lock = threading.Lock()
        self._stream: int | None = lib.sonicCreateStream(sample_rate, 1)
        if not self._stream:
            raise MemoryError("sonicCreateStream failed")
        lib.sonicSetSpeed(self._stream, ctypes.c_float(factor))
        lib.sonicSetQuality(self._stream, 1)  # the slower, better pitch search
        self.factor = factor
        self._due = 0.0
        """Output samples the input so far makes at its factors, less those read."""

    def set_factor(self, factor: float) -> None:
        """From the next samples on (a clause's own factor; the held-back samples of the
        one before keep theirs as far as libsonic has processed them)."""
        with self._lock:
            if self._stream is not None and factor != self.factor:
                self._lib.sonicSetSpeed(self._stream, ctypes.c_float(factor))
                self.factor = factor

    def _ptr(self, a: FloatArray) -> ctypes._Pointer[ctypes.c_float]:
        return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

    @property
    def held(self) -> float:
        """Output samples libsonic owes for the input so far (what it holds back, at the
        factors the input came with): where the next input starts in the output is the
        samples read so far plus these."""
        with self._lock:
            return max(0.0, self._due)

    def _read(self) -> FloatArray:
        assert self._stream is not None
        n = int(self._lib.sonicSamplesAvailable(self._stream))
        out = np.empty(max(n, 0), dtype=np.float32)
        if n > 0:
            got = int(self._lib.sonicReadFloatFromStream(self._stream, self._ptr(out), n))
            out = out[: max(got, 0)]
        self._due -= len(out)
        return out

    def process(self, samples: FloatArray) -> FloatArray:
        """Stretch one chunk: what is ready of it (and of earlier chunks) now."""
        with self._lock:
            if self._stream is None:
                raise RuntimeError("stretcher closed")
            x = np.ascontiguousarray(samples, dtype=np.float32)
            if len(x):
                if not self._lib.sonicWriteFloatToStream(self._stream, self._ptr(x), len(x)):
                    raise MemoryError("sonicWriteFloatToStream failed")
                self._due += len(x) / self.factor
            return self._read()

    def flush(self) -> FloatArray:
        """The rest, at the end of the stream."""
        with self._lock:
            if self._stream is None:
                return np.zeros(0, np.float32)
            self._lib.sonicFlushStream(self._stream)
            out = self._read()
            self._due = 0.0  # all out: what it gave is the input's length from here on
            return out

    def close(self) -> None:
        with self._lock:
            if self._stream is not None:
                self._lib.sonicDestroyStream(self._stream)
                self._stream = None

    def __del__(self) -> None:
        self.close()
