"""What a message asks ttsd for: the voice speech-dispatcher's settings choose, and the
request options (format, mode, speed, volume, speaker) — pure functions of the module's
configuration, the settings ``SET`` gave and the daemon's ``info``.

Bounds: ``rate`` −100…100 maps onto speed 0.5×…4× (ttsd's range), ``volume`` −100…100
onto 0…1; a ``NAME:SPEAKER`` speaker is cut to 256 characters; ``LIST VOICES`` lists at
most :data:`SPEAKERS_LISTED` speakers of a voice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appliance.clients.speechd.config import ModuleConfig
from appliance.speech import SPEED

SPEAKERS_LISTED = 32
"""``LIST VOICES`` shows a multi-speaker voice as ``NAME:SPEAKER``, one row per speaker,
for its first this many speakers (libritts_r has 904: a menu of them helps no one); any
other speaker is still chosen by setting ``NAME:SPEAKER`` as the synthesis voice."""


def voices_of(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The voices ``info`` lists (entries that are not a named map are skipped)."""
    return [v for v in info.get("voices") or () if isinstance(v, dict) and "name" in v]


def resolve_voice(
    cfg: ModuleConfig, settings: Mapping[str, Any], info: Mapping[str, Any]
) -> str | None:
    """The voice to ask for: the synthesis voice set, else the module's map for the
    language and voice type, else one of the language (the configured default, then the
    daemon's, preferred), else the configured default; None: the daemon's default."""
    voices = voices_of(info)
    names_ = [str(v["name"]) for v in voices]
    wanted = settings.get("synthesis_voice")
    if wanted in names_:
        return str(wanted)
    name, speaker = voice_speaker(wanted)
    if speaker is not None and name in names_:
        return name
    language = settings.get("language")
    mapped = cfg.voice_for(language, settings.get("voice"))
    if mapped in names_:
        return mapped
    default = cfg.default_voice if cfg.default_voice in names_ else None
    if language:
        lang = str(language).lower().replace("_", "-")
        for exact in (True, False):
            matching = [
                str(v["name"])
                for v in voices
                if _lang_matches(str(v.get("language", "")), lang, exact)
            ]
            if matching:
                for preferred in (default, info.get("default_voice")):
                    if preferred in matching:
                        return str(preferred)
                return matching[0]
    return default


def request_options(
    cfg: ModuleConfig, settings: Mapping[str, Any], info: Mapping[str, Any]
) -> dict[str, Any]:
    """The fields of a ``synthesize`` request besides its text."""
    opts: dict[str, Any] = {"format": "s16le", "mode": cfg.mode}
    if cfg.deterministic:
        # A screen reader says the same phrases again and again: the same audio each time.
        opts["deterministic"] = True
    voice = resolve_voice(cfg, settings, info)
    if voice:
        opts["voice"] = voice
        name, speaker = voice_speaker(settings.get("synthesis_voice"))
        if speaker is not None and name == voice:
            opts["speaker"] = speaker
    rate = settings.get("rate")
    if isinstance(rate, int) and rate:
        # −100…0 onto 0.5×…1×, 0…100 onto 1×…4× (Orca's rate 100 is 4×; past 1.25×
        # ttsd time-stretches), 0 the voice's own pace.
        top = 4.0 if rate > 0 else 2.0
        lo, hi = SPEED
        opts["speed"] = round(min(hi, max(lo, top ** (rate / 100.0))), 3)
    volume = settings.get("volume")
    if isinstance(volume, int):
        # speech-dispatcher's default is 100, its loudest: the voice's own level.
        opts["volume"] = round((volume + 100) / 200.0, 3)
    return opts


def listed_names(voice: Mapping[str, Any]) -> list[str]:
    """A voice's rows in ``LIST VOICES``: its name, or ``NAME:SPEAKER`` per speaker."""
    speakers = voice.get("speakers") or []
    if not isinstance(speakers, list) or len(speakers) < 2:
        return [str(voice["name"])]
    return [f"{voice['name']}:{s}" for s in speakers[:SPEAKERS_LISTED]]


def voice_speaker(wanted: object) -> tuple[str | None, str | None]:
    """``NAME:SPEAKER`` → (NAME, SPEAKER); anything else → (it, None)."""
    if not isinstance(wanted, str) or ":" not in wanted:
        return (wanted if isinstance(wanted, str) else None), None
    name, _, speaker = wanted.partition(":")
    return name, speaker[:256] or None


def _lang_matches(voice_language: str, wanted: str, exact: bool) -> bool:
    have = voice_language.lower().replace("_", "-")
    if exact:
        return have == wanted
    return have.split("-")[0] == wanted.split("-")[0]
