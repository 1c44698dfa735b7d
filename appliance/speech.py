"""The neutral types every door speaks to the service core in.

A :class:`SpeechRequest` says what to say and how; a stream answers with
:class:`Chunk` objects: float samples at the voice's rate with the request's
volume applied, where they fall in the request's audio, and which characters of
the text *as sent* they speak.  Nothing here knows a wire format.

Every numeric field's range is stated here once (:data:`LIMITS`: speed 0.5–4.0, noise_scale
and noise_w 0.0–2.0, volume 0.0–2.0, keepalive_ms 20–60000, pace_ms 5–1000, sample_rate
8000–192000) and checked with :func:`within`; :meth:`SpeechRequest.validate` and the doors
call it, each door writing the refusal in its own shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from appliance.errors import ErrorCode, ServiceError

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
"""Sample and phoneme-id arrays: the shapes every layer passes around."""

MODES = ("dialog", "reading", "sentence")
PRIORITIES = ("important", "message", "text", "notification", "progress")
TEXT_FORMATS = ("text", "ssml", "markdown")
TEXT_STARTS = ("eager", "sentence")
"""How a text stream's sentence starts: from its first words while it is still being
written (``eager``), or once it is complete (``sentence``)."""

# ---------------------------------------------------------------- the limits of request fields
# Each inclusive range is stated here once; SpeechRequest.validate and every door check
# against these (a door maps its own wire names and error shapes onto them).

MAX_SPEED = 4.0
SPEED = (0.5, MAX_SPEED)
"""Past the voice's own limit (:data:`appliance.model.stretch.VOICE_SPEED_LIMIT`) the voice
renders at that limit and a time-stretch (libsonic) does the rest."""
NOISE = (0.0, 2.0)
"""``noise_scale`` and ``noise_w``."""
VOLUME = (0.0, 2.0)
KEEPALIVE_MS = (20, 60000)
PACE_MS = (5, 1000)
"""Frames of exactly this many milliseconds on the real-time clock (appliance.doors.pace;
telephony uses 10–60 ms)."""
SAMPLE_RATE = (8000, 192000)
"""The rate raw audio is resampled to when a client asks for one."""
LIMITS: dict[str, tuple[float, float]] = {
    "speed": SPEED,
    "noise_scale": NOISE,
    "noise_w": NOISE,
    "volume": VOLUME,
    "keepalive_ms": KEEPALIVE_MS,
    "pace_ms": PACE_MS,
    "sample_rate": SAMPLE_RATE,
}
"""Every numeric request field's range, by its name in :class:`SpeechRequest` and v1."""


def within(key: str, value: float) -> bool:
    """Is ``value`` a finite number within the range of the field ``key`` (:data:`LIMITS`)?"""
    lo, hi = LIMITS[key]
    return math.isfinite(value) and lo <= value <= hi


def range_text(key: str, sep: str = "–") -> str:
    """The range of the field ``key`` as the refusals write it: ``0.5–4.0``, ``20–60000``."""
    lo, hi = LIMITS[key]
    return f"{lo}{sep}{hi}"


@dataclass(frozen=True)
class SpeechRequest:
    """One request, whatever door it came through.  ``None`` means "the voice's default"."""

    text: str = ""
    """The whole text, or with ``text_stream`` the first piece (may be empty)."""
    text_stream: bool = False
    """More text comes later through :meth:`Stream.append`; :meth:`Stream.finish` ends it."""
    text_format: str = "text"
    voice: str | None = None
    language: str | None = None
    """With no ``voice``: the first loaded voice of this language (Wyoming's rule)."""
    speaker: str | int | None = None
    speed: float | None = None
    noise_scale: float | None = None
    noise_w: float | None = None
    volume: float = 1.0
    mode: str | None = None
    realtime: bool = True
    """False: file/batch work, lowest priority, never refused as busy."""
    priority: str = "message"
    """For speech on the device only (speech-dispatcher's meanings)."""
    word_timings: bool = False
    """Chunks carry :class:`Word` timings (``Chunk.words``); off: chunks are as before."""
    visemes: bool = False
    """Chunks carry :class:`Viseme` timings (``Chunk.visemes``); off: chunks are as before."""
    deterministic: bool | None = None
    """Seed the sampling noise from the text and settings (None: ``voices.deterministic``)."""
    text_start: str = "sentence"
    """``text_stream``: ``eager`` speaks a sentence's first words while it is being written
    (docs/textstream.md); ``sentence`` waits for it as before.  Other requests: unused."""
    keepalive_ms: int | None = None
    """``text_stream``: while the audio waits for text, a short silent chunk after this
    long without one (None: never)."""

    def validate(self) -> None:
        """The checks every door shares; a door checks its own wire types first."""

        def bad(msg: str) -> ServiceError:
            return ServiceError(ErrorCode.BAD_REQUEST, msg)

        for key in ("speed", "noise_scale", "noise_w", "volume", "keepalive_ms"):
            value = getattr(self, key)
            if value is not None and not within(key, value):
                raise bad(f"'{key}' must be within {range_text(key)}")
        if self.mode is not None and self.mode not in MODES:
            raise bad(f"'mode' must be one of {', '.join(MODES)}")
        if self.priority not in PRIORITIES:
            raise bad(f"'priority' must be one of {', '.join(PRIORITIES)}")
        if self.text_format not in TEXT_FORMATS:
            raise bad(f"'text_format' must be one of {', '.join(TEXT_FORMATS)}")
        if self.text_start not in TEXT_STARTS:
            raise bad(f"'text_start' must be one of {', '.join(TEXT_STARTS)}")


@dataclass(frozen=True)
class Mark:
    """A named point in the request's audio (SSML ``<mark/>``)."""

    name: str
    offset_ms: float


@dataclass(frozen=True)
class Word:
    """A written word of the text and where its sound lies in the request's audio
    (``word_timings``): from the model's own phoneme durations, exact to a frame."""

    text_span: tuple[int, int]
    """[start, end) in the text as sent: one written token ("$49.95"), however many
    spoken words it became."""
    offset_ms: float
    """Its first phoneme's start, from the start of the request's audio."""
    duration_ms: float
    """To its last phoneme's end (pauses between words are in no word)."""


@dataclass(frozen=True)
class Viseme:
    """A mouth shape and where it lies in the request's audio (``visemes``): from the
    model's own phoneme durations, as word timings are.  A chunk's visemes tile it."""

    viseme: int
    """Its number in the OVR set (``appliance.text.visemes.VISEMES``: 0 is ``sil``)."""
    offset_ms: float
    """From the start of the request's audio."""
    duration_ms: float


@dataclass(frozen=True)
class Chunk:
    seq: int
    samples: FloatArray
    """Mono float32 in [-1, 1] at ``sample_rate``, the request's volume applied."""
    sample_rate: int
    offset_ms: float
    """Where this chunk starts in the request's audio."""
    duration_ms: float
    text_span: tuple[int, int]
    """[start, end) of the characters it speaks, in the text as sent (appends concatenated)."""
    sentence_end: bool
    final: bool = False
    """The request's last chunk, when that is known as it is made (not for text that
    streams in: the text may still grow)."""
    marks: tuple[Mark, ...] = ()
    words: tuple[Word, ...] | None = None
    """With ``word_timings``: the words whose sound starts in this chunk; None: not asked."""
    visemes: tuple[Viseme, ...] | None = None
    """With ``visemes``: the chunk's mouth shapes in order, tiling exactly its
    ``[offset_ms, offset_ms + duration_ms)`` (equal neighbours merged); None: not asked."""
