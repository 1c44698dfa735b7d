"""``POST /v1/audio/speech``'s JSON body → a :class:`~appliance.speech.SpeechRequest`,
validated in one place.

What it adds to the frame: the door's own part, the message → request mapping (as
:mod:`appliance.doors.wyoming.messages` is Wyoming's), a pure function of the body, the
``http`` settings and the voices' names, testable without a socket.

OpenAI's fields (``input``, ``voice`` — a name or ``{"id": ...}`` —, ``response_format``,
``speed`` 0.25–4.0, ``stream_format``, ``model``), then ttsd's extensions (``noise_scale``
and ``noise_w`` 0.0–2.0, ``text_format``, ``stream``, ``word_timings``, ``visemes``,
``deterministic``, ``sample_rate`` 8000–192000 and ``pace_ms`` for the raw formats), each
checked as it is read: a bad one is :class:`BadField` (``bad_request`` naming its
``param``).  A JSON number past a float's range is refused, not an OverflowError; a body
nested past the parser's depth is refused, not a RecursionError.

The body's size and arrival time are bounded before it gets here
(:func:`appliance.doors.http.gate.read_body`).  Voices: a ttsd voice name, an OpenAI
name mapped through ``http.voice_map``, ``NAME:SPEAKER``, or none (the default voice);
an unknown name passes through for the core to refuse (``unknown_voice``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from appliance.doors import captions
from appliance.doors.formats import FORMATS, RAW_FORMATS
from appliance.doors.pcm import G711_RATE
from appliance.errors import ErrorCode, ServiceError
from appliance.model.stretch import VOICE_SPEED_LIMIT
from appliance.model.stretch import available as stretch_available
from appliance.ops.config import HttpConfig
from appliance.speech import SPEED, TEXT_FORMATS, SpeechRequest, range_text, within

OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip
OPENAI_SPEED = (0.25, 4.0)
TTSD_SPEED = SPEED
"""Past 1.25× (``VOICE_SPEED_LIMIT``) the voice is time-stretched (libsonic); without
libsonic, clamped there."""
STREAM_FORMATS = ("audio", "sse")
RESPONSE_FORMATS = (*FORMATS, *captions.CAPTION_FORMATS)
"""Every ``response_format`` taken: the one list a refusal names."""


class BadField(ServiceError):
    """A field of the body that is not as documented: ``param`` names it ("" the body)."""

    def __init__(self, param: str, message: str, code: str = ErrorCode.BAD_REQUEST) -> None:
        super().__init__(code, message)
        self.param = param


@dataclass(frozen=True)
class SpeechBody:
    """The JSON body of ``POST /v1/audio/speech``, validated in one place."""

    input: str
    voice: str | None
    response_format: str = "mp3"
    speed: float = 1.0
    stream_format: str = "audio"
    model: str | None = None
    """Accepted and ignored: ttsd has one model per voice."""
    noise_scale: float | None = None
    noise_w: float | None = None
    """ttsd extensions (protocol v1's meanings; 0 = the same audio every time)."""
    text_format: str | None = None
    """ttsd extension: ``text``, ``ssml`` or ``markdown``; None: ``http.text_format``."""
    stream: bool = True
    """False: a whole reply (:mod:`appliance.doors.whole`), a file with its real lengths
    (Kokoro-FastAPI's ``/dev/captioned_speech``: one JSON object, not NDJSON lines)."""
    word_timings: bool = False
    """ttsd extension: with ``stream_format: sse``, a ``ttsd.speech.word`` event per word."""
    visemes: bool = False
    """ttsd extension: with ``stream_format: sse`` a ``ttsd.speech.visemes`` event per
    chunk; captioned speech: ``visemes`` with each line (the whole reply's with one)."""
    sample_rate: int | None = None
    pace_ms: int | None = None
    """ttsd extensions for the raw formats (pcm, wav, G.711): the rate (G.711: 8000 Hz
    unless given), and frames of exactly ``pace_ms`` on the real-time clock."""
    deterministic: bool | None = None
    """ttsd extension: seeded sampling noise, the same bytes for the same text."""

    @classmethod
    def from_dict(cls, d: Any) -> SpeechBody:
        """OpenAI's fields, then ttsd's extensions, each checked as it is read."""
        if not isinstance(d, dict):
            raise BadField("", "the body must be a JSON object")
        text, voice, fmt, speed, sfmt, model = _openai_fields(d)
        return cls(text, voice, fmt, speed, sfmt, model, **_extensions(d, fmt))

    @classmethod
    def parse(cls, raw: bytes) -> SpeechBody:
        """The body's bytes as JSON, then :meth:`from_dict`."""
        try:
            data = json.loads(raw)
        except RecursionError:
            raise BadField("", "the body is nested too deeply") from None
        except (ValueError, UnicodeDecodeError):
            raise BadField("", "the body is not valid JSON") from None
        return cls.from_dict(data)

    def to_request(self, captioned: bool, cfg: HttpConfig, voices: Container[str]) -> SpeechRequest:
        """The core's request (``captioned``: Kokoro's ``/dev/captioned_speech``); the
        checks that need the endpoint too."""
        if captioned and self.response_format in captions.CAPTION_FORMATS:
            raise BadField("response_format", "captioned speech is audio: not vtt or srt")
        if self.visemes and not (captioned or self.stream_format == "sse"):
            raise BadField("visemes", "'visemes' come as events: with sse or captioned speech")
        voice, speaker = voice_and_speaker(self.voice, voices, cfg.voice_map)
        return SpeechRequest(
            text=self.input,
            voice=voice,
            speaker=speaker,
            speed=self.applied_speed(),
            noise_scale=self.noise_scale,
            noise_w=self.noise_w,
            text_format=self.text_format or cfg.text_format,
            word_timings=captioned
            or self.word_timings
            or self.response_format in captions.CAPTION_FORMATS,
            visemes=self.visemes,
            deterministic=self.deterministic,
        )

    @property
    def whole(self) -> bool:
        """Made whole before it is sent: captions, or ``"stream": false``."""
        return self.response_format in captions.CAPTION_FORMATS or not self.stream

    def out_rate(self, voice_rate: int) -> int | None:
        """The rate raw audio is sent at (None: the encoder's own choice)."""
        if self.sample_rate is not None:
            return self.sample_rate
        return G711_RATE if "law" in self.response_format else None

    def applied_speed(self) -> float:
        """OpenAI allows 0.25–4.0; ttsd 0.5–4.0 (0.5–1.25 without libsonic): clamped."""
        top = TTSD_SPEED[1] if stretch_available() else VOICE_SPEED_LIMIT
        return min(top, max(TTSD_SPEED[0], self.speed))

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "voice": self.voice,
            "response_format": self.response_format,
            "speed": self.speed,
            "stream_format": self.stream_format,
            "model": self.model,
            "noise_scale": self.noise_scale,
            "noise_w": self.noise_w,
            "text_format": self.text_format,
            "stream": self.stream,
            "word_timings": self.word_timings,
            "visemes": self.visemes,
            "sample_rate": self.sample_rate,
            "pace_ms": self.pace_ms,
            "deterministic": self.deterministic,
        }


def _bool(d: dict[str, Any], key: str) -> bool | None:
    value = d.get(key)
    if value is not None and not isinstance(value, bool):
        raise BadField(key, f"'{key}' must be true or false")
    return value


def _int(d: dict[str, Any], key: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not within(key, value):
        raise BadField(key, f"'{key}' must be an integer within {range_text(key)}")
    return value


def _openai_fields(d: dict[str, Any]) -> tuple[str, str | None, str, float, str, str | None]:
    """``(input, voice, response_format, speed, stream_format, model)``, as OpenAI has them."""
    text = d.get("input")
    if not isinstance(text, str):
        raise BadField("input", "'input' must be a string")
    voice = d.get("voice")
    if isinstance(voice, dict):  # OpenAI's custom voice object {"id": ...}
        voice = voice.get("id")
    if voice is not None and (not isinstance(voice, str) or not voice):
        raise BadField("voice", "'voice' must be a voice name")
    fmt = d.get("response_format", "mp3")
    if fmt not in RESPONSE_FORMATS:
        what = f"{fmt!r} is not supported" if isinstance(fmt, str) else "'response_format'"
        raise BadField("response_format", f"{what}: use one of {', '.join(RESPONSE_FORMATS)}")
    speed = _number(d, "speed", 1.0)
    if speed is None or not OPENAI_SPEED[0] <= speed <= OPENAI_SPEED[1]:
        lo, hi = OPENAI_SPEED
        raise BadField("speed", f"'speed' must be a number within {lo}–{hi}")
    sfmt = d.get("stream_format", "audio")
    if sfmt not in STREAM_FORMATS:
        raise BadField("stream_format", "'stream_format' must be 'audio' or 'sse'")
    model = d.get("model")
    if model is not None and not isinstance(model, str):
        raise BadField("model", "'model' must be a string")
    return text, voice, fmt, speed, sfmt, model


def _extensions(d: dict[str, Any], fmt: str) -> dict[str, Any]:
    """ttsd's extensions of the body, by :class:`SpeechBody`'s field names."""
    out: dict[str, Any] = {}
    for key in ("noise_scale", "noise_w"):
        value = _number(d, key, None)
        if value is not None and not within(key, value):
            raise BadField(key, f"'{key}' must be a number within {range_text(key)}")
        out[key] = value
    text_format = d.get("text_format")
    if text_format is not None and text_format not in TEXT_FORMATS:
        raise BadField("text_format", f"'text_format' must be one of {', '.join(TEXT_FORMATS)}")
    out["text_format"] = text_format
    for key, default in (("stream", True), ("word_timings", False), ("visemes", False)):
        flag = d.get(key, default)
        if not isinstance(flag, bool):
            raise BadField(key, f"'{key}' must be true or false")
        out[key] = flag
    for key in ("sample_rate", "pace_ms"):
        out[key] = _int(d, key)
        if out[key] is not None and fmt not in RAW_FORMATS:
            raise BadField(key, f"'{key}' is for {', '.join(RAW_FORMATS)} only")
    if not out["stream"]:
        # A whole file is made before it is sent: nothing of it can be paced or evented.
        for key, streamed in (("pace_ms", None), ("stream_format", "audio")):
            if d.get(key, streamed) != streamed:
                raise BadField(key, f"'{key}' streams: not with \"stream\": false")
    if out["visemes"] and out["pace_ms"] is not None:
        raise BadField("visemes", "'visemes' go with chunks: not with paced frames")
    out["deterministic"] = _bool(d, "deterministic")
    return out


def _number(d: dict[str, Any], key: str, default: float | None) -> float | None:
    """A JSON number as a finite float (``default`` when absent); BadField otherwise.
    JSON integers have any number of digits: one past a float's range is refused, not an
    OverflowError."""
    value = d.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadField(key, f"'{key}' must be a number")
    try:
        f = float(value)
    except OverflowError:
        raise BadField(key, f"'{key}' is out of range") from None
    if not math.isfinite(f):
        raise BadField(key, f"'{key}' must be a finite number")
    return f


def voice_for(name: str | None, voices: Container[str], voice_map: dict[str, str]) -> str | None:
    """A ttsd voice name, an OpenAI name mapped through ``voice_map``, or None (the
    default voice); an unknown name passes through for the core to refuse."""
    if name is None or name in voices:
        return name
    mapped = voice_map.get(name)
    if mapped is not None:
        return mapped
    if name.lower() in OPENAI_VOICES:
        return voice_map.get(name.lower())
    return name


def voice_and_speaker(
    name: str | None, voices: Container[str], voice_map: dict[str, str]
) -> tuple[str | None, str | None]:
    """``voice`` (or what ``voice_map`` maps it to) as ``NAME`` or ``NAME:SPEAKER``
    (a speaker's name or number): voice names never hold a colon."""
    voice = voice_for(name, voices, voice_map)
    if voice is None or ":" not in voice:
        return voice, None
    voice, _, speaker = voice.partition(":")
    return voice or None, speaker
