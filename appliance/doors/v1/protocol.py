"""Protocol v1: message types, validation and the msgpack codec.

The wire is a stream of msgpack maps.  Client → server: ``{"op", "id", ...}``;
server → client: ``{"id", "event", ...}``.  One small dataclass per message,
each with ``from_dict`` (requests: all validation lives there) and
``to_dict``.  Audio stays a msgpack ``bin`` field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack

from appliance.doors.captions import visemes_dict
from appliance.doors.pace import PacedFrame
from appliance.doors.pcm import PCM_FORMATS, default_rate
from appliance.errors import ErrorCode, ServiceError
from appliance.speech import (
    MODES,
    PRIORITIES,
    TEXT_FORMATS,
    TEXT_STARTS,
    Chunk,
    Mark,
    SpeechRequest,
    Viseme,
    Word,
    range_text,
    within,
)

PROTOCOL_VERSION = 1


ProtocolError = ServiceError
"""The name protocol v1 code uses for a :class:`ServiceError` (the same class)."""


FORMATS = PCM_FORMATS


# ---------------------------------------------------------------- field checks


def _req_id(d: dict[str, Any]) -> int:
    rid = d.get("id")
    if isinstance(rid, bool) or not isinstance(rid, int):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "'id' must be an integer")
    if not -(2**63) <= rid < 2**64:
        raise ProtocolError(ErrorCode.BAD_REQUEST, "'id' out of range")
    return rid


def _target(d: dict[str, Any]) -> int:
    target = d.get("target")
    if isinstance(target, bool) or not isinstance(target, int):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "'target' must be an integer id")
    return target


def _text(d: dict[str, Any], default: str | None = None) -> str:
    """The message's ``text``: required (unless a ``default`` stands in), a string."""
    text = d.get("text", default)
    if not isinstance(text, str):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "'text' is required and must be a string")
    return text


def _opt_str(d: dict[str, Any], key: str, max_len: int = 256) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"'{key}' must be a string")
    if len(v) > max_len:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"'{key}' is too long")
    return v


def _out_of_range(key: str) -> ProtocolError:
    """The refusal of a number outside its range (appliance.speech.LIMITS)."""
    return ProtocolError(
        ErrorCode.BAD_REQUEST, f"'{key}' must be between {range_text(key, ' and ')}"
    )


def _opt_num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"'{key}' must be a number")
    f = float(v)
    if not within(key, f):
        raise _out_of_range(key)
    return f


def _opt_int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"'{key}' must be an integer")
    if not within(key, v):
        raise _out_of_range(key)
    return v


def _opt_choice(d: dict[str, Any], key: str, choices: tuple[str, ...]) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if v not in choices:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"'{key}' must be one of {', '.join(choices)}")
    assert isinstance(v, str)
    return v


def _opt_bool(d: dict[str, Any], key: str) -> bool | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"'{key}' must be true or false")
    return v


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class SimpleRequest:
    """``info``, ``stats``, ``health``, ``warmup``, ``ping``, ``stop``: just an op and an id."""

    op: str
    id: int

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "id": self.id}


@dataclass(frozen=True)
class SynthesizeRequest:
    OP: ClassVar[str] = "synthesize"

    id: int
    text: str
    voice: str | None = None
    speaker: str | int | None = None
    format: str = "s16le"
    sample_rate: int | None = None
    speed: float | None = None
    noise_scale: float | None = None
    noise_w: float | None = None
    volume: float = 1.0
    mode: str | None = None
    realtime: bool = True
    text_stream: bool = False
    text_format: str | None = None
    """``text``, ``ssml`` or ``markdown``; None: the door's default (``v1.text_format``)."""
    pace_ms: int | None = None
    """synthesize only: send frames of exactly this many ms on the real-time clock."""
    deterministic: bool | None = None
    """Seeded sampling noise: the same text gives the same bytes (None: the config's)."""
    # speak only
    priority: str = "message"
    op: str = "synthesize"
    word_timings: bool = False
    visemes: bool = False
    """Chunks carry ``visemes`` (:func:`~appliance.doors.captions.visemes_dict`)."""
    text_start: str | None = None
    """``text_stream``: ``eager`` or ``sentence``; None: the door's default (``v1.text_start``)."""
    keepalive_ms: int | None = None
    """``text_stream``: a short silent chunk after this long without audio while text is
    awaited (None: never)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any], op: str = "synthesize") -> SynthesizeRequest:
        rid = _req_id(d)
        text_stream = bool(_opt_bool(d, "text_stream"))
        text = _text(d, "" if text_stream else None)
        speaker = d.get("speaker")
        if speaker is not None:
            if isinstance(speaker, bool) or not isinstance(speaker, str | int):
                raise ProtocolError(ErrorCode.BAD_REQUEST, "'speaker' must be a name or a number")
            if isinstance(speaker, str) and len(speaker) > 256:
                raise ProtocolError(ErrorCode.BAD_REQUEST, "'speaker' is too long")
        fmt = _opt_choice(d, "format", FORMATS) if op == "synthesize" else None
        for key in ("format", "pace_ms"):
            if op == "speak" and key in d:
                raise ProtocolError(ErrorCode.BAD_REQUEST, f"'{key}' is not a field of speak")
        return cls(
            id=rid,
            text=text,
            voice=_opt_str(d, "voice"),
            speaker=speaker,
            format=fmt or "s16le",
            sample_rate=_opt_int(d, "sample_rate"),
            speed=_opt_num(d, "speed"),
            noise_scale=_opt_num(d, "noise_scale"),
            noise_w=_opt_num(d, "noise_w"),
            volume=v if (v := _opt_num(d, "volume")) is not None else 1.0,
            mode=_opt_choice(d, "mode", MODES),
            realtime=r if (r := _opt_bool(d, "realtime")) is not None else True,
            text_stream=text_stream,
            text_format=_opt_choice(d, "text_format", TEXT_FORMATS),
            pace_ms=_opt_int(d, "pace_ms"),
            deterministic=_opt_bool(d, "deterministic"),
            priority=(_opt_choice(d, "priority", PRIORITIES) or "message")
            if op == "speak"
            else "message",
            op=op,
            word_timings=bool(_opt_bool(d, "word_timings")),
            visemes=bool(_opt_bool(d, "visemes")),
            text_start=_opt_choice(d, "text_start", TEXT_STARTS),
            keepalive_ms=_opt_int(d, "keepalive_ms"),
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "id": self.id, "text": self.text}
        for key in ("voice", "speaker", "sample_rate", "speed", "noise_scale", "noise_w", "mode"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.op == "synthesize":
            d["format"] = self.format
        else:
            d["priority"] = self.priority
        if self.volume != 1.0:
            d["volume"] = self.volume
        if not self.realtime:
            d["realtime"] = False
        if self.text_stream:
            d["text_stream"] = True
        if self.text_format is not None:
            d["text_format"] = self.text_format
        if self.word_timings:
            d["word_timings"] = True
        if self.visemes:
            d["visemes"] = True
        if self.pace_ms is not None:
            d["pace_ms"] = self.pace_ms
        if self.deterministic is not None:
            d["deterministic"] = self.deterministic
        for key in ("text_start", "keepalive_ms"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        return d

    def out_rate(self, voice_rate: int) -> int:
        """The rate audio is sent at: ``sample_rate``, else 8000 Hz for G.711, else the voice's."""
        return self.sample_rate or default_rate(self.format, voice_rate)

    def speech(
        self, default_format: str = "text", default_start: str = "sentence"
    ) -> SpeechRequest:
        """The neutral request the service core takes (``default_format`` when the request
        names no ``text_format``, ``default_start`` no ``text_start``)."""
        return SpeechRequest(
            text=self.text,
            text_stream=self.text_stream,
            text_format=self.text_format or default_format,
            voice=self.voice,
            speaker=self.speaker,
            speed=self.speed,
            noise_scale=self.noise_scale,
            noise_w=self.noise_w,
            volume=self.volume,
            mode=self.mode,
            realtime=self.realtime,
            priority=self.priority,
            word_timings=self.word_timings,
            visemes=self.visemes,
            deterministic=self.deterministic,
            text_start=self.text_start or default_start,
            keepalive_ms=self.keepalive_ms,
        )


@dataclass(frozen=True)
class CancelRequest:
    OP: ClassVar[str] = "cancel"

    id: int
    target: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CancelRequest:
        return cls(id=_req_id(d), target=_target(d))

    def to_dict(self) -> dict[str, Any]:
        return {"op": "cancel", "id": self.id, "target": self.target}


@dataclass(frozen=True)
class AppendRequest:
    """More text for an open ``text_stream`` request; no id, no reply on success."""

    OP: ClassVar[str] = "append"

    target: int
    text: str
    flush: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AppendRequest:
        target = _target(d)
        text = _text(d)
        return cls(target=target, text=text, flush=bool(_opt_bool(d, "flush")))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": "append", "target": self.target, "text": self.text}
        if self.flush:
            d["flush"] = True
        return d


@dataclass(frozen=True)
class FinishRequest:
    """No more text for an open ``text_stream`` request; no id, no reply on success."""

    OP: ClassVar[str] = "finish"

    target: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FinishRequest:
        return cls(target=_target(d))

    def to_dict(self) -> dict[str, Any]:
        return {"op": "finish", "target": self.target}


@dataclass(frozen=True)
class PhonemesRequest:
    """What a voice says for a text, word by word (``ttsctl phonemes``, lexicon writing).

    Answered by ``phonemes {voice, clauses: [{text, span, phonemes, words: [{text,
    phonemes}]}]}``: the text after normalisation and the lexicon, as the voice's espeak IPA.
    """

    OP: ClassVar[str] = "phonemes"

    id: int
    text: str
    voice: str | None = None
    text_format: str | None = None
    """As synthesize's: None is the door's default."""
    op: str = "phonemes"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PhonemesRequest:
        rid = _req_id(d)
        text = _text(d)
        return cls(
            id=rid,
            text=text,
            voice=_opt_str(d, "voice"),
            text_format=_opt_choice(d, "text_format", TEXT_FORMATS),
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "id": self.id, "text": self.text}
        if self.voice is not None:
            d["voice"] = self.voice
        if self.text_format is not None:
            d["text_format"] = self.text_format
        return d


Request = (
    SimpleRequest
    | SynthesizeRequest
    | CancelRequest
    | AppendRequest
    | FinishRequest
    | PhonemesRequest
)

SIMPLE_OPS = frozenset({"info", "stats", "health", "warmup", "ping", "stop"})


def parse_request(msg: Any) -> Request:
    """Validate one decoded client message.  Raises :class:`ProtocolError`."""
    if not isinstance(msg, dict):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "a message must be a map")
    op = msg.get("op")
    if not isinstance(op, str):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "'op' is required and must be a string")
    if op in ("synthesize", "speak"):
        return SynthesizeRequest.from_dict(msg, op)
    if op == "cancel":
        return CancelRequest.from_dict(msg)
    if op == "append":
        return AppendRequest.from_dict(msg)
    if op == "finish":
        return FinishRequest.from_dict(msg)
    if op == "phonemes":
        return PhonemesRequest.from_dict(msg)
    if op in SIMPLE_OPS:
        return SimpleRequest(op=op, id=_req_id(msg))
    # Validate the id first so the error can carry it back.
    _req_id(msg)
    raise ProtocolError(ErrorCode.UNKNOWN_OP, f"unknown op {op[:64]!r}")


def request_id_of(msg: Any) -> int | None:
    """The id of a (possibly invalid) message, if it has a usable one."""
    if isinstance(msg, dict):
        rid = msg.get("id")
        if isinstance(rid, int) and not isinstance(rid, bool) and -(2**63) <= rid < 2**64:
            return rid
    return None


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class StartEvent:
    id: int
    sample_rate: int
    format: str
    voice: str
    channels: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "event": "start",
            "sample_rate": self.sample_rate,
            "format": self.format,
            "channels": self.channels,
            "voice": self.voice,
        }


def word_dict(w: Word) -> dict[str, Any]:
    """A word timing on the wire (chunk ``words``)."""
    return {
        "text_span": list(w.text_span),
        "offset_ms": round(w.offset_ms, 3),
        "duration_ms": round(w.duration_ms, 3),
    }


def frame_visemes(frame: PacedFrame[Chunk]) -> tuple[Viseme, ...] | None:
    """A paced frame's visemes (``pace_ms``): its chunks' cut to the frame's span, so
    frames tile the audio as chunks do (a padded last frame ends in ``sil``); None: the
    chunks carry none."""
    shapes = [v for c in frame.pieces if c.visemes is not None for v in c.visemes]
    if not frame.pieces or frame.pieces[0].visemes is None:
        return None
    start, end = frame.offset_ms, frame.offset_ms + frame.duration_ms
    out: list[Viseme] = []
    for v in shapes:
        a, b = max(start, v.offset_ms), min(end, v.offset_ms + v.duration_ms)
        if b <= a:
            continue
        if out and out[-1].viseme == v.viseme:
            a = out.pop().offset_ms
        out.append(Viseme(v.viseme, a, b - a))
    reach = out[-1].offset_ms + out[-1].duration_ms if out else start
    if reach < end:  # the silence padding the last frame
        a = out.pop().offset_ms if out and out[-1].viseme == 0 else reach
        out.append(Viseme(0, a, end - a))
    return tuple(out)


@dataclass(frozen=True)
class ChunkEvent:
    id: int
    seq: int
    audio: bytes
    offset_ms: float
    duration_ms: float
    text_span: tuple[int, int]
    sentence_end: bool

    marks: tuple[Mark, ...] = ()
    words: tuple[Word, ...] | None = None
    visemes: tuple[Viseme, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "id": self.id,
            "event": "chunk",
            "seq": self.seq,
            "audio": self.audio,
            "offset_ms": round(self.offset_ms, 3),
            "duration_ms": round(self.duration_ms, 3),
            "text_span": list(self.text_span),
            "sentence_end": self.sentence_end,
        }
        if self.marks:
            d["marks"] = [{"name": m.name, "offset_ms": round(m.offset_ms, 3)} for m in self.marks]
        if self.words is not None:
            d["words"] = [word_dict(w) for w in self.words]
        if self.visemes is not None:
            d["visemes"] = visemes_dict(self.visemes)
        return d

    @classmethod
    def from_chunk(cls, rid: int, chunk: Chunk, audio: bytes) -> ChunkEvent:
        return cls(
            id=rid,
            seq=chunk.seq,
            audio=audio,
            offset_ms=chunk.offset_ms,
            duration_ms=chunk.duration_ms,
            text_span=chunk.text_span,
            sentence_end=chunk.sentence_end,
            marks=chunk.marks,
            words=chunk.words,
            visemes=chunk.visemes,
        )

    @classmethod
    def from_frame(cls, rid: int, frame: PacedFrame[Chunk], word_timings: bool) -> ChunkEvent:
        """A paced frame (``pace_ms``): ``offset_ms`` = seq · N, the span of the chunks it
        carries, the marks of those that begin in it, ``sentence_end`` when one that ends a
        sentence ends in it, and with ``word_timings`` the words whose start is in it."""
        spans = [c.text_span for c in frame.pieces]
        return cls(
            id=rid,
            seq=frame.index,
            audio=frame.data,
            offset_ms=frame.offset_ms,
            duration_ms=frame.duration_ms,
            text_span=(min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0),
            sentence_end=any(c.sentence_end for c in frame.ends),
            marks=tuple(m for c in frame.starts for m in c.marks),
            words=tuple(frame.words) if word_timings else None,
            visemes=frame_visemes(frame),
        )


@dataclass(frozen=True)
class EndEvent:
    id: int
    cancelled: bool
    stats: dict[str, Any] = field(default_factory=dict)
    interrupted: bool | None = None
    heard: tuple[int, int] | None = None
    """``speak`` with ``word_timings``: the span of the text fully played."""
    sent_text_span: tuple[int, int] | None = None
    """A cancelled ``synthesize``: how far in the text the audio sent reaches."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "event": "end",
            "cancelled": self.cancelled,
            "stats": self.stats,
        }
        if self.interrupted is not None:
            d["interrupted"] = self.interrupted
        if self.heard is not None:
            d["heard"] = list(self.heard)
        if self.sent_text_span is not None:
            d["sent_text_span"] = list(self.sent_text_span)
        return d


@dataclass(frozen=True)
class ErrorEvent:
    id: int | None
    code: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "event": "error",
            "code": self.code,
            "message": self.message,
        }
        d.update(self.extra)
        return d

    @classmethod
    def from_exc(cls, rid: int | None, exc: ProtocolError) -> ErrorEvent:
        return cls(rid, exc.code, exc.message, dict(exc.extra))


@dataclass(frozen=True)
class SimpleEvent:
    """``ok``, ``pong``, ``cancelled``, ``queued``, ``started``, ``info``, ``stats``, ``health``."""

    id: int | None
    event: str
    body: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "event": self.event}
        d.update(self.body)
        return d


Event = StartEvent | ChunkEvent | EndEvent | ErrorEvent | SimpleEvent


# ---------------------------------------------------------------- codec


def pack(message: dict[str, Any]) -> bytes:
    out: bytes = msgpack.packb(message, use_bin_type=True)
    return out


class BadMap:
    """A decoded map whose keys Python cannot hold in a dict (an array or a map as a
    key): the message is refused with ``bad_request``, the stream stays in step."""


def _map(pairs: list[tuple[Any, Any]]) -> dict[Any, Any] | BadMap:
    try:
        return dict(pairs)
    except TypeError:
        return BadMap()


def make_unpacker(max_message_bytes: int) -> msgpack.Unpacker:
    """A streaming decoder that refuses single objects over the cap.

    ``max_buffer_size`` bounds what one message may occupy.  Invalid UTF-8 in a
    string decodes to lone surrogates instead of raising: a strict decoder
    would lose its place in the stream, while this way the request is refused
    with ``bad_request`` and the connection goes on.  So is a map with an
    unhashable key (see :class:`BadMap`).
    """
    return msgpack.Unpacker(
        raw=False,
        unicode_errors="surrogateescape",
        max_buffer_size=max_message_bytes,
        strict_map_key=False,
        use_list=True,
        object_pairs_hook=_map,
    )


class FrameReader:
    """Messages out of a byte stream, each at most ``max_message_bytes``, however many
    arrive in one read.

    The decoder's buffer holds twice the cap: what is left of a message begun in an
    earlier read (never more than the cap, or it is refused) plus one read of at most
    :attr:`read_size` bytes, so messages sent back to back never overflow it however
    they are batched, and the memory one connection holds stays bounded.  Each message's
    own size is checked from the decoder's offsets (``tell``)."""

    def __init__(self, max_message_bytes: int) -> None:
        self.limit = max_message_bytes
        self._unpacker = make_unpacker(2 * max_message_bytes)
        self._fed = 0
        self._start = 0
        """Where the message being read began: msgpack's ``tell`` moves past the parts of
        a container it has read when the rest has not arrived, so a message's size is
        counted from here, not from ``tell`` at the last call."""

    @property
    def read_size(self) -> int:
        """The most one :meth:`feed` may add."""
        return self.limit

    @property
    def partial(self) -> bool:
        """Bytes of a message have arrived but not the whole message."""
        consumed: int = self._unpacker.tell()
        return self._fed > consumed

    def feed(self, data: bytes) -> None:
        if len(data) > self.limit:
            raise ValueError(f"feed at most {self.limit} bytes at a time")
        self._unpacker.feed(data)
        self._fed += len(data)

    def next_message(self) -> tuple[bool, Any]:
        """``(True, message)``, or ``(False, None)`` when no whole message is buffered.

        Raises ServiceError ``frame_too_large`` for a message over the cap (whole or
        still arriving), and msgpack's own errors for bytes that are not msgpack."""
        try:
            msg = next(self._unpacker)
        except StopIteration:
            if self._fed - self._start > self.limit:
                raise self._too_large() from None
            return False, None
        except msgpack.BufferFull:  # a declared length past the buffer: over the cap
            raise self._too_large() from None
        end = self._unpacker.tell()
        size, self._start = end - self._start, end
        if size > self.limit:
            raise self._too_large()
        return True, msg

    def _too_large(self) -> ServiceError:
        return ServiceError(
            ErrorCode.FRAME_TOO_LARGE, f"a message may be at most {self.limit} bytes"
        )
