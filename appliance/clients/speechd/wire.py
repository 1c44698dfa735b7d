"""speech-dispatcher's output-module protocol, the module's side: what goes on the pipe.

The server writes commands on the module's stdin, one per line (``SPEAK``, ``SET`` …);
data blocks follow some of them line by line up to a lone ``.``, a leading dot doubled
("dot-stuffing").  The module answers on stdout with SMTP-like lines: ``NNN-text`` for
all but the last line of a reply, ``NNN text`` for the last.  Events (``701 BEGIN`` …)
come unasked, between replies.  Audio goes back in ``705`` blocks: header lines, then
``705-AUDIO``, a NUL, the samples with every newline and 0x7D byte escaped as 0x7D
followed by the byte with bit 5 flipped (HDLC), a newline, and ``705 AUDIO``.

Matches speech-dispatcher 0.11 (``src/modules/module_process.c`` and the server's
``src/server/output.c``), checked against the Debian 0.11.4 ``sd_espeak-ng`` driven by
hand.
"""

from __future__ import annotations

from dataclasses import dataclass

# Replies, exactly as speech-dispatcher 0.11 words them.
INIT_OK = "299 OK LOADED SUCCESSFULLY"
INIT_FAILED = "399 ERR CANT INIT MODULE"
RECEIVING_MESSAGE = "202 OK RECEIVING MESSAGE"
SPEAKING = "200 OK SPEAKING"
RECEIVING_SETTINGS = "203 OK RECEIVING SETTINGS"
RECEIVING_AUDIO_SETTINGS = "207 OK RECEIVING AUDIO SETTINGS"
RECEIVING_LOGLEVEL = "207 OK RECEIVING LOGLEVEL SETTINGS"
SETTINGS_RECEIVED = "203 OK SETTINGS RECEIVED"
AUDIO_INITIALIZED = "203 OK AUDIO INITIALIZED"
LOGLEVEL_SET = "203 OK LOGLEVEL SET"
VOICE_LIST_SENT = "200 OK VOICE LIST SENT"
CANT_LIST_VOICES = "304 CANT LIST VOICES"
QUIT_OK = "210 OK QUIT"
UNKNOWN_COMMAND = "300 ERR UNKNOWN COMMAND"
MODULE_ERROR = "300 MODULE ERROR"
CANT_SPEAK = "301 ERROR CANT SPEAK"
BAD_SYNTAX = "302 ERROR BAD SYNTAX"
BAD_PARAM = "303 ERROR INVALID PARAMETER OR VALUE"
MORE_THAN_ONE_LINE = "305 DATA MORE THAN ONE LINE"

# Events.
BEGIN = "701 BEGIN"
END = "702 END"
STOP = "703 STOP"
PAUSE = "704 PAUSE"

_ESCAPE = 0x7D
_INVERT = 0x20
_ESCAPE_TABLE = {b: bytes((_ESCAPE, b ^ _INVERT)) for b in (0x0A, _ESCAPE)}


def line(text: str) -> bytes:
    """One reply or event line; newlines inside ``text`` cannot break the framing."""
    return (text.replace("\n", " ").replace("\r", " ") + "\n").encode("utf-8", "replace")


def multiline(code: int, lines: list[str], last: str) -> bytes:
    """``NNN-line`` for each of ``lines``, then ``last`` (which carries its own code)."""
    body = b"".join(line(f"{code}-{text}") for text in lines)
    return body + line(last)


def index_mark(name: str) -> bytes:
    return line(f"700-{name}") + line("700 INDEX MARK")


def sound_icon(name: str) -> bytes:
    return line(f"706-{name}") + line("706 ICON")


def hdlc_escape(data: bytes) -> bytes:
    """Escape newline and 0x7D as the server's parser expects (0x7D, byte ^ 0x20)."""
    if b"\n" not in data and b"\x7d" not in data:
        return data
    out = bytearray()
    start = 0
    for i, byte in enumerate(data):
        if byte in _ESCAPE_TABLE:
            out += data[start:i]
            out += _ESCAPE_TABLE[byte]
            start = i + 1
    out += data[start:]
    return bytes(out)


def hdlc_unescape(data: bytes) -> bytes:
    """The server's side of :func:`hdlc_escape` (used by the tests and the benchmark)."""
    out = bytearray()
    it = iter(data)
    for byte in it:
        if byte == _ESCAPE:
            out.append(next(it) ^ _INVERT)
        else:
            out.append(byte)
    return bytes(out)


@dataclass(frozen=True)
class AudioBlock:
    """One ``705`` block: signed 16-bit mono little-endian samples at ``sample_rate``."""

    pcm: bytes
    sample_rate: int

    def __post_init__(self) -> None:
        if len(self.pcm) % 2:
            raise ValueError("s16 audio must have an even number of bytes")
        if not 1000 <= self.sample_rate <= 384000:
            raise ValueError(f"implausible sample rate {self.sample_rate}")

    @property
    def num_samples(self) -> int:
        return len(self.pcm) // 2

    def encode(self) -> bytes:
        header = (
            "705-bits=16\n"
            "705-num_channels=1\n"
            f"705-sample_rate={self.sample_rate}\n"
            f"705-num_samples={self.num_samples}\n"
            "705-big_endian=0\n"
            "705-AUDIO\0"
        ).encode("ascii")
        return header + hdlc_escape(self.pcm) + b"\n705 AUDIO\n"


def unstuff(raw: bytes) -> bytes:
    """A data line with its dot-stuffing removed (``..x`` was sent for ``.x``)."""
    return raw[1:] if raw.startswith(b".") else raw


@dataclass(frozen=True)
class Settings:
    """What ``SET`` carries, validated in one place.  ``None``: not sent (keep the old value).

    speech-dispatcher sends every field before every message; a value it has no setting for
    arrives as ``NULL``.
    """

    rate: int | None = None
    pitch: int | None = None
    pitch_range: int | None = None
    volume: int | None = None
    punctuation_mode: str | None = None
    spelling_mode: str | None = None
    cap_let_recogn: str | None = None
    voice: str | None = None
    language: str | None = None
    synthesis_voice: str | None = None

    _INTS = ("rate", "pitch", "pitch_range", "volume")

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, str]]) -> Settings:
        """Raises ``ValueError`` for a number out of −100…100 or not a number.

        Unknown names are ignored: a newer server may send more than this module uses.
        """
        values: dict[str, object] = {}
        for name, raw in pairs:
            if name not in cls.__dataclass_fields__ or name.startswith("_"):
                continue
            if name in cls._INTS:
                number = int(raw)
                if not -100 <= number <= 100:
                    raise ValueError(f"{name}={raw} is outside -100..100")
                values[name] = number
            else:
                values[name] = None if raw == "NULL" else raw[:256]
        return cls(**values)  # type: ignore[arg-type]


def parse_pair(raw: bytes) -> tuple[str, str]:
    """``name=value`` of a settings block.  Raises ``ValueError`` when there is no ``=``."""
    text = raw.decode("utf-8", "replace").rstrip("\r")
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"bad settings line {text[:80]!r}")
    return name.strip(), value
