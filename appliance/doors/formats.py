"""Audio container and codec encoders: bytes out chunk by chunk, or a whole file.

Used by the HTTP door (``response_format``) and ``ttsctl synth -o``.  ``wav`` and ``pcm``
are written here (a WAV header, then s16le samples as they come);
so are the G.711 extensions of OpenAI's list — ``mulaw`` and ``alaw`` (raw, 8 kHz unless
the request's ``sample_rate`` says otherwise) and ``wav_mulaw`` / ``wav_alaw`` (WAV with
format tag 7 / 6, one byte a sample: what telephony tools open);
``flac``, ``mp3`` and ``opus`` (Ogg) go through libsndfile (the ``soundfile`` wheel
carries it with libFLAC, LAME/mpg123 and libopus), writing into an in-memory sink
whose new bytes are taken after every chunk.  No ffmpeg subprocess.

A streamed file cannot be rewritten: where libsndfile seeks back at the end to fill
in lengths (the FLAC STREAMINFO total and MD5, the MP3 Info tag), the bytes already
sent stay as they were — their "unknown" values, which decoders accept; a streamed WAV's
sizes say "unknown" (0xFFFFFFFF).  A whole file (:class:`FileOut`) is written into a
seekable target (a file on disk, or memory the HTTP door sends with a Content-Length)
and gets the real lengths: libsndfile rewrites its headers there, and a WAV header's
sizes are filled in at the end.  Its size is the caller's to bound; nothing here is held
beyond one chunk's bytes.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

import numpy as np
import soundfile

from appliance.doors.pcm import PcmEncoder
from appliance.speech import FloatArray

log = logging.getLogger(__name__)

FORMATS = ("mp3", "opus", "flac", "wav", "pcm", "mulaw", "alaw", "wav_mulaw", "wav_alaw")
"""Every audio format there is an encoder for: the one list errors name."""
RAW_FORMATS = ("pcm", "wav", "mulaw", "alaw", "wav_mulaw", "wav_alaw")
"""Written here, sample by sample: these take ``sample_rate`` and ``pace_ms``."""
SAMPLE_FORMATS = {
    "pcm": "s16le",
    "wav": "s16le",
    "mulaw": "mulaw",
    "alaw": "alaw",
    "wav_mulaw": "mulaw",
    "wav_alaw": "alaw",
}
_WAVE_FORMAT = {"s16le": 1, "alaw": 6, "mulaw": 7}
"""WAVE_FORMAT_PCM, WAVE_FORMAT_ALAW, WAVE_FORMAT_MULAW."""

CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "mulaw": "audio/PCMU",
    "alaw": "audio/PCMA",
    "wav_mulaw": "audio/wav",
    "wav_alaw": "audio/wav",
}

_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_SFC_SET_OGG_PAGE_LATENCY_MS = 0x1302
"""libsndfile ≥ 1.2: how much audio an Ogg page may hold before it is written (default
1000 ms).  soundfile has no wrapper for it."""
_OGG_PAGE_LATENCY_MS = 50.0
_MP3_LEVEL = 0.6
"""LAME compression level in soundfile's 0–1 scale: ~64 kbit/s constant bit rate, plenty
for 22 kHz mono speech.  Constant, not variable: a VBR stream needs its Xing header
rewritten at the end, and without it mpg123 stops early."""


def set_ogg_page_latency(sound: soundfile.SoundFile, ms: float) -> bool:
    """Ogg pages of ``ms`` instead of libsndfile's 1 s, so Opus audio leaves with each
    chunk; False when this soundfile cannot.

    The one use of soundfile's internals (``_ffi``, ``_snd``, ``SoundFile._file``):
    soundfile wraps only a few of libsndfile's ``sf_command`` codes, and this one has no
    public route.  tests/doors/test_formats.py fails if a release drops them, so the loss
    of short pages is never silent."""
    try:
        ffi, snd = soundfile._ffi, soundfile._snd
        value = ffi.new("double*", ms)
        snd.sf_command(sound._file, _SFC_SET_OGG_PAGE_LATENCY_MS, value, ffi.sizeof("double"))
    except (AttributeError, TypeError):  # a soundfile without these internals
        return False
    return True


class Encoder(Protocol):
    content_type: str
    sample_rate: int
    """Of the encoded audio (Opus may resample)."""

    def header(self) -> bytes:
        """What goes out before the first samples."""

    def encode(self, samples: FloatArray, last: bool = False) -> bytes:
        """Encode one chunk; returns the bytes ready now (possibly none)."""

    def finish(self) -> bytes:
        """Flush what is left; the encoder cannot be used afterwards."""


class PcmOut:
    """Raw mono samples (s16le, or G.711 for ``mulaw`` / ``alaw``), at the voice's rate
    unless ``out_rate`` says otherwise."""

    def __init__(self, sample_rate: int, fmt: str = "pcm", out_rate: int | None = None) -> None:
        self.content_type = CONTENT_TYPES[fmt]
        self.pcm = PcmEncoder(sample_rate, out_rate or sample_rate, SAMPLE_FORMATS[fmt])
        self.sample_rate = self.pcm.out_rate
        self._pcm = self.pcm

    def header(self) -> bytes:
        return b""

    def encode(self, samples: FloatArray, last: bool = False) -> bytes:
        return self._pcm(samples, last)

    def finish(self) -> bytes:
        return b""


class WavOut(PcmOut):
    """RIFF/WAVE mono, 16-bit PCM or 8-bit G.711.  Streamed, the RIFF and data sizes say
    "unknown" (0xFFFFFFFF), as every streaming server does: the length is not known when
    the header leaves."""

    def header(self, data_bytes: int | None = None) -> bytes:
        """The header for ``data_bytes`` of samples (None: unknown, streamed)."""
        rate = self.sample_rate
        width = self.pcm.bytes_per_sample
        tag = _WAVE_FORMAT[self.pcm.fmt]
        fmt = struct.pack("<HHIIHH", tag, 1, rate, rate * width, width, 8 * width)
        if tag != 1:
            fmt += struct.pack("<H", 0)  # cbSize: a non-PCM format's fmt chunk has one
        if data_bytes is None:
            riff = data = 0xFFFFFFFF
        else:
            # A chunk of odd length is followed by a pad byte (FileOut writes it), which
            # the RIFF size counts and the data size does not.
            data = data_bytes
            riff = 4 + (8 + len(fmt)) + 8 + data_bytes + data_bytes % 2
        return (
            b"RIFF"
            + struct.pack("<I", riff)
            + b"WAVEfmt "
            + struct.pack("<I", len(fmt))
            + fmt
            + b"data"
            + struct.pack("<I", data)
        )


class _Sink:
    """A file object for libsndfile: bytes are kept until taken; a write before what was
    already taken (a header rewrite at close) cannot reach the client and is dropped."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._base = 0  # file offset of _buf[0]
        self._pos = 0
        self._size = 0

    def write(self, data: Any) -> int:
        b = bytes(data)
        n = len(b)
        start = self._pos - self._base
        if start < 0:
            b = b[-start:] if -start < n else b""
            start = 0
        if b:
            end = start + len(b)
            if end > len(self._buf):
                self._buf.extend(b"\0" * (end - len(self._buf)))
            self._buf[start:end] = b
        self._pos += n
        self._size = max(self._size, self._pos)
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._pos = offset
        elif whence == 1:
            self._pos += offset
        else:
            self._pos = self._size + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        return b""  # write-only

    def take(self) -> bytes:
        out = bytes(self._buf)
        self._base += len(out)
        self._buf.clear()
        return out


class SoundfileOut:
    """FLAC, MP3 or Ogg/Opus through libsndfile, bytes taken after every chunk; or, with a
    seekable ``target``, written into it (the calls then return no bytes) and its headers
    rewritten with the real lengths at :meth:`finish`."""

    def __init__(self, fmt: str, sample_rate: int, target: BinaryIO | None = None) -> None:
        self.content_type = CONTENT_TYPES[fmt]
        rate = sample_rate
        kwargs: dict[str, Any] = {}
        if fmt == "flac":
            container, subtype = "FLAC", "PCM_16"
        elif fmt == "mp3":
            container, subtype = "MP3", "MPEG_LAYER_III"
            kwargs = {"bitrate_mode": "CONSTANT", "compression_level": _MP3_LEVEL}
        elif fmt == "opus":
            container, subtype = "OGG", "OPUS"
            if rate not in _OPUS_RATES:
                # Opus takes only these rates: the next one up keeps the whole band.
                rate = next((r for r in _OPUS_RATES if r >= sample_rate), 48000)
        else:
            raise ValueError(f"no soundfile encoder for {fmt!r}")
        self.sample_rate = rate
        # 16-bit samples made exactly as protocol v1 makes them (FLAC is then bit-exact
        # with v1's s16le), resampled on the way when Opus needs it.
        self._pcm = PcmEncoder(sample_rate, rate, "s16le")
        sink = _Sink() if target is None else None
        self._take: Callable[[], bytes] = sink.take if sink is not None else bytes
        self._lock = threading.Lock()
        """One call at a time: encode runs in worker threads, close may come from the loop."""
        self._file = soundfile.SoundFile(
            sink if sink is not None else target,
            "w",
            samplerate=rate,
            channels=1,
            format=container,
            subtype=subtype,
            **kwargs,
        )
        if fmt == "opus" and not set_ogg_page_latency(self._file, _OGG_PAGE_LATENCY_MS):
            log.warning("opus: cannot shorten Ogg pages: audio leaves about once a second")

    def _short_pages(self) -> None:
        """Ogg pages of ~50 ms instead of 1 s, so audio leaves with each chunk."""
        try:
            ffi, snd = soundfile._ffi, soundfile._snd
            value = ffi.new("double*", _OGG_PAGE_LATENCY_MS)
            snd.sf_command(
                self._file._file, _SFC_SET_OGG_PAGE_LATENCY_MS, value, ffi.sizeof("double")
            )
        except (AttributeError, TypeError) as exc:  # a soundfile without these internals
            log.warning(
                "opus: cannot shorten Ogg pages (%s): audio leaves about once a second", exc
            )

    def header(self) -> bytes:
        return self._take()

    def encode(self, samples: FloatArray, last: bool = False) -> bytes:
        with self._lock:
            if self._file.closed:
                return b""
            # A resampler's tail is flushed once, by finish().
            self._write(self._pcm(samples, False))
            return self._take()

    def finish(self) -> bytes:
        with self._lock:
            if self._file.closed:
                return b""
            self._write(self._pcm(np.zeros(0, np.float32), True))
            self._file.close()
            return self._take()

    def _write(self, pcm: bytes) -> None:
        if pcm:
            self._file.write(np.frombuffer(pcm, dtype="<i2"))

    def close(self) -> None:
        """Release the encoder without finishing (the client went away).  Waits for an
        encode still running in a worker thread: libsndfile must not be closed under it."""
        with self._lock:
            if not self._file.closed:
                self._file.close()


def make_encoder(
    fmt: str, sample_rate: int, out_rate: int | None = None, target: BinaryIO | None = None
) -> Encoder:
    """``out_rate``: for :data:`RAW_FORMATS` only (the codecs keep the voice's rate);
    ``target``: libsndfile's formats write into it (see :class:`SoundfileOut`)."""
    if fmt in ("pcm", "mulaw", "alaw"):
        return PcmOut(sample_rate, fmt, out_rate)
    if fmt in ("wav", "wav_mulaw", "wav_alaw"):
        return WavOut(sample_rate, fmt, out_rate)
    return SoundfileOut(fmt, sample_rate, target)


class FileOut:
    """A whole file with its real lengths, written chunk by chunk into an empty seekable
    binary ``target`` (a file opened ``w+b``, or ``io.BytesIO``):
    libsndfile rewrites its own headers there; a WAV header's sizes are filled in by
    :meth:`finish`.  One call at a time, in any thread."""

    def __init__(
        self, fmt: str, sample_rate: int, target: BinaryIO, out_rate: int | None = None
    ) -> None:
        self.target = target
        self._enc = make_encoder(fmt, sample_rate, out_rate, target)
        self.content_type = self._enc.content_type
        self.sample_rate = self._enc.sample_rate
        target.write(self._enc.header())
        self._data = target.tell()

    def write(self, samples: FloatArray) -> None:
        self.target.write(self._enc.encode(samples))

    def finish(self) -> None:
        """The encoder's tail (the resampler's too), then the real lengths; the target is
        left at its end."""
        self.target.write(self._enc.encode(np.zeros(0, np.float32), last=True))
        self.target.write(self._enc.finish())
        if isinstance(self._enc, WavOut):
            end = self.target.tell()
            size = end - self._data
            if size % 2:
                self.target.write(b"\0")  # RIFF's pad byte after a chunk of odd length
                end += 1
            self.target.seek(0)
            self.target.write(self._enc.header(size))
            self.target.seek(end)

    def close(self) -> None:
        """Let go without finishing (the request failed or was refused)."""
        if isinstance(self._enc, SoundfileOut):
            self._enc.close()
