"""The module's configuration file (``ttsd.conf``), in speech-dispatcher's dotconf syntax.

speech-dispatcher starts a module as ``sd_ttsd CONFIG``.  Lines are ``Name value …`` with
values optionally in double quotes, ``#`` comments, a trailing backslash continuing a line;
names are case-insensitive.  What ``sd_ttsd`` reads::

    TtsdSocket "/run/ttsd/ttsd.sock"     # else $TTSD_SOCKET, else ttsctl's default
    TtsdDefaultVoice "en_US-joe-medium"  # else the daemon's default voice
    TtsdMode "dialog"                    # dialog | reading | sentence
    AddVoice "en" "MALE1" "en_US-joe-medium"   # speech-dispatcher voice type -> ttsd voice
    LogLevel 3                           # 0 (errors) … 5 (debug); Debug 1 = 5

Unknown names are logged and ignored, so a config written for a newer module still loads.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("sd_ttsd")

MODES = ("dialog", "reading", "sentence")
VOICE_TYPES = (
    "MALE1",
    "MALE2",
    "MALE3",
    "FEMALE1",
    "FEMALE2",
    "FEMALE3",
    "CHILD_MALE",
    "CHILD_FEMALE",
)


class ConfigError(ValueError):
    """The file cannot be read or has a bad value (the message names the line)."""


@dataclass(frozen=True)
class VoiceMapping:
    language: str
    voice_type: str
    ttsd_voice: str


@dataclass(frozen=True)
class ModuleConfig:
    socket: str | None = None
    default_voice: str | None = None
    mode: str = "dialog"
    voices: tuple[VoiceMapping, ...] = ()
    log_level: int = 3
    deterministic: bool = True
    """``TtsdDeterministic``: a phrase sounds the same every time it is read (seeded noise)."""

    def voice_for(self, language: str | None, voice_type: str | None) -> str | None:
        """The ``AddVoice`` entry for this language and type: exact language first, then
        the same base language (``en`` for ``en-GB``), then any language with this type."""
        if voice_type is None:
            return None
        vt = voice_type.upper()
        lang = (language or "").lower().replace("_", "-")
        base = lang.split("-")[0]
        candidates = [m for m in self.voices if m.voice_type == vt]
        for exact in (True, False):
            for m in candidates:
                have = m.language.lower().replace("_", "-")
                if have == lang if exact else have.split("-")[0] == base:
                    return m.ttsd_voice
        return None


@dataclass
class _Builder:
    values: dict[str, object] = field(default_factory=dict)
    voices: list[VoiceMapping] = field(default_factory=list)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append((start, pending + stripped))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def parse(text: str, source: str = "ttsd.conf") -> ModuleConfig:
    b = _Builder()
    for number, logical in _logical_lines(text):
        try:
            words = shlex.split(logical, comments=True, posix=True)
        except ValueError as exc:
            raise ConfigError(f"{source}:{number}: {exc}") from exc
        if not words:
            continue
        name, args = words[0].lower(), words[1:]
        where = f"{source}:{number}"

        def one(args: list[str] = args, where: str = where, key: str = words[0]) -> str:
            if len(args) != 1:
                raise ConfigError(f"{where}: {key} takes one value")
            return args[0]

        if name == "ttsdsocket":
            b.values["socket"] = one()
        elif name == "ttsddefaultvoice":
            b.values["default_voice"] = one()
        elif name == "ttsdmode":
            mode = one()
            if mode not in MODES:
                raise ConfigError(f"{where}: TtsdMode must be one of {', '.join(MODES)}")
            b.values["mode"] = mode
        elif name == "ttsddeterministic":
            flag = one().lower()
            if flag not in ("0", "1", "yes", "no", "true", "false", "on", "off"):
                raise ConfigError(f"{where}: TtsdDeterministic takes 1 or 0")
            b.values["deterministic"] = flag in ("1", "yes", "true", "on")
        elif name == "addvoice":
            if len(args) != 3:
                raise ConfigError(f'{where}: AddVoice "language" "TYPE" "ttsd-voice"')
            vt = args[1].upper()
            if vt not in VOICE_TYPES:
                raise ConfigError(f"{where}: voice type must be one of {', '.join(VOICE_TYPES)}")
            b.voices.append(VoiceMapping(args[0], vt, args[2]))
        elif name in ("loglevel", "debug"):
            try:
                level = int(one())
            except ValueError as exc:
                raise ConfigError(f"{where}: {words[0]} takes a number") from exc
            b.values["log_level"] = 5 if name == "debug" and level else max(0, min(5, level))
        else:
            log.warning("%s: unknown setting %s ignored", where, words[0])
    return ModuleConfig(voices=tuple(b.voices), **b.values)  # type: ignore[arg-type]


def load(path: str | Path | None) -> ModuleConfig:
    if path is None:
        return ModuleConfig()
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    return parse(text, str(path))
