"""Wyoming's requests as the core's: ``synthesize`` and ``synthesize-start`` → a
:class:`~appliance.speech.SpeechRequest`.

Each field is checked for its type and length here (names at most 256 characters, a
speaker id at most nine digits); the core checks the rest (voice, text, format) as on
every door.  A ``voice`` names a voice, else a language, else the default voice; a
speaker given as a numeric string that is not one of the voice's speaker names counts
as an id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wyoming.event import Event
from wyoming.tts import SynthesizeStart

from appliance.core.service import Service
from appliance.errors import ErrorCode, ServiceError
from appliance.speech import SpeechRequest

_MAX_SPEAKER_DIGITS = 9
"""A speaker id beyond this many digits names no voice's speaker (they have a few hundred)."""

_MAX_NAME_CHARS = 256
"""Voice, language and speaker names: as protocol v1 caps them."""


@dataclass(frozen=True)
class VoiceChoice:
    """``voice`` of ``synthesize`` / ``synthesize-start``: name, else language, else default."""

    name: str | None = None
    language: str | None = None
    speaker: str | int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> VoiceChoice:
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ServiceError(ErrorCode.BAD_REQUEST, "'voice' must be an object")
        name, language, speaker = data.get("name"), data.get("language"), data.get("speaker")
        for key, value in (("name", name), ("language", language)):
            if value is not None and not isinstance(value, str):
                raise ServiceError(ErrorCode.BAD_REQUEST, f"'voice.{key}' must be a string")
        if speaker is not None and (
            isinstance(speaker, bool) or not isinstance(speaker, str | int)
        ):
            raise ServiceError(
                ErrorCode.BAD_REQUEST, "'voice.speaker' must be a name or an integer"
            )
        if isinstance(speaker, int) and not 0 <= speaker < 2**31:
            raise ServiceError(ErrorCode.BAD_REQUEST, "'voice.speaker' is out of range")
        for key, value in (("name", name), ("language", language), ("speaker", speaker)):
            if isinstance(value, str) and len(value) > _MAX_NAME_CHARS:
                raise ServiceError(ErrorCode.BAD_REQUEST, f"'voice.{key}' is too long")
        return cls(name or None, language or None, speaker)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for key in ("name", "language", "speaker"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        return d


@dataclass(frozen=True)
class SynthesizeMessage:
    """``synthesize`` (``text`` set) or ``synthesize-start`` (``text_stream``)."""

    voice: VoiceChoice = field(default_factory=VoiceChoice)
    text: str = ""
    text_stream: bool = False
    text_format: str = "text"
    text_start: str = "sentence"
    """``synthesize-start``: ``eager`` or ``sentence`` (ttsd's extension; the door's
    default ``wyoming.text_start`` when the event names none)."""

    @classmethod
    def from_event(
        cls, event: Event, default_format: str = "text", default_start: str = "sentence"
    ) -> SynthesizeMessage:
        """``default_format`` (``wyoming.text_format``) and ``default_start``
        (``wyoming.text_start``) when the event names none."""
        data = event.data
        stream = SynthesizeStart.is_type(event.type)
        text = data.get("text", "")
        if not stream and not isinstance(text, str):
            raise ServiceError(ErrorCode.BAD_REQUEST, "'text' must be a string")
        text_format = data.get("text_format") or default_format
        if not isinstance(text_format, str):
            raise ServiceError(ErrorCode.BAD_REQUEST, "'text_format' must be a string")
        text_start = data.get("text_start") or default_start
        if not isinstance(text_start, str):
            raise ServiceError(ErrorCode.BAD_REQUEST, "'text_start' must be a string")
        voice = VoiceChoice.from_dict(data.get("voice"))
        return cls(voice, "" if stream else text, stream, text_format, text_start)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"voice": self.voice.to_dict(), "text_format": self.text_format}
        if not self.text_stream:
            d["text"] = self.text
        else:
            d["text_start"] = self.text_start
        return d

    def speech(self, service: Service) -> SpeechRequest:
        """The core's request; the voice is resolved here so a speaker given as a numeric
        string that is not one of the voice's speaker names counts as an id."""
        v = self.voice
        voice, _sid = service.resolve_voice(v.name, None, v.language)
        speaker = v.speaker
        # Only ASCII digits, and few enough for a speaker id: "²".isdigit() is true and
        # int("²") raises; so does int() of more than 4 300 digits.
        if isinstance(speaker, str) and speaker.isascii() and speaker.isdigit():
            if speaker not in voice.source.info.speaker_id_map:
                if len(speaker) > _MAX_SPEAKER_DIGITS:
                    raise ServiceError(
                        ErrorCode.BAD_REQUEST, f"voice {voice.name} has no speaker {speaker[:16]}…"
                    )
                speaker = int(speaker)
        return SpeechRequest(
            text=self.text,
            text_stream=self.text_stream,
            text_format=self.text_format,
            text_start=self.text_start,
            voice=voice.name,
            speaker=speaker,
        )
