"""Wyoming's framing: events in (bounded before anything is read) and events out as bytes.

Events and their framing are the ``wyoming`` package's (``async_read_event``,
``write_event``); this module bounds what a client can make the reader hold and turns
what is not an event into an error:

- :class:`BoundedReader` is the connection's :class:`asyncio.StreamReader`: a header
  line, ``data_length`` and ``payload_length`` are each capped at
  ``limits.max_message_bytes`` (64 KiB) *before* anything is read (:class:`FrameTooLarge`:
  ``frame_too_large``), and it counts bytes in and out so that an event begun and not
  finished is seen (the frame's ``frame_timeout_s``).
- :func:`read_event` raises :class:`BadEvent` for bytes that cannot be an event
  (``bad_request``): the stream cannot be resynchronised, the connection is closed.
- :func:`event_bytes` frames an event for the session's output; :func:`info_event` is
  ``describe``'s answer (one TTS program, every loaded voice).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterable
from typing import SupportsIndex

from wyoming.error import Error
from wyoming.event import Event, async_read_event, write_event
from wyoming.info import Attribution, Info, TtsProgram, TtsVoice, TtsVoiceSpeaker

from appliance import __version__
from appliance.core.service import Service
from appliance.errors import ErrorCode, ServiceError

SAMPLE_WIDTH = 2
"""16-bit PCM: what Home Assistant and every Wyoming satellite play."""
_PIPER = Attribution(name="rhasspy", url="https://github.com/rhasspy/piper")
_TTSD = Attribution(name="ttsd", url="")
"""ttsd has no public home page to point at (yet)."""


class FrameTooLarge(Exception):
    """A header line or a declared length over the limit: the connection is closed."""


class BadEvent(Exception):
    """Bytes that are not a Wyoming event: the connection is closed."""


# ---------------------------------------------------------------- reading, bounded


class BoundedReader(asyncio.StreamReader):
    """The connection's reader, as ``async_read_event`` uses it, with every length checked
    before it is read: ``readline`` is capped by the reader's own limit, and
    ``readexactly`` (``data_length``, ``payload_length``) refuses a declared length over
    ``limit`` instead of buffering it.  Counts bytes in and out, so a half-received event
    is seen (frame timeout)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)
        self.max_length = limit
        self.fed = 0
        self.consumed = 0
        self.in_body = False
        self.on_data: Callable[[], None] | None = None

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        self.fed += len(data)  # type: ignore[arg-type]  # the transport feeds bytes
        super().feed_data(data)
        if self.on_data is not None:
            self.on_data()

    async def readline(self) -> bytes:
        try:
            line = await super().readline()
        except ValueError as exc:  # asyncio's "chunk exceed the limit"
            raise FrameTooLarge(f"an event header may be at most {self.max_length} bytes") from exc
        self.consumed += len(line)
        return line

    async def readexactly(self, n: int) -> bytes:
        if isinstance(n, bool) or not isinstance(n, int):
            raise BadEvent("data_length and payload_length must be integers")
        if n > self.max_length:
            raise FrameTooLarge(
                f"data_length and payload_length may be at most {self.max_length} bytes"
            )
        self.in_body = True
        if self.on_data is not None:
            self.on_data()  # a header is in: its data and payload are due within the frame timeout
        data = await super().readexactly(n)  # (still in_body if this is cut short)
        self.in_body = False
        self.consumed += n
        return data

    @property
    def partial(self) -> bool:
        """Bytes of an event have arrived but not the whole event."""
        return self.fed > self.consumed or self.in_body


async def read_event(reader: BoundedReader) -> Event | None:
    """The next event, None at EOF; FrameTooLarge / BadEvent for what cannot be one."""
    try:
        event = await async_read_event(reader)
    except asyncio.IncompleteReadError:
        return None  # the client went away in the middle of an event
    except (FrameTooLarge, BadEvent):
        raise
    except (AttributeError, KeyError, TypeError, RecursionError, OverflowError) as exc:
        # The library reads any JSON: a list, a header without "type", data that is
        # not an object … none of it is an event.
        raise BadEvent(f"not a Wyoming event ({type(exc).__name__})") from exc
    if event is None:
        if reader.at_eof():
            return None
        # async_read_event swallows JSON errors and answers None without EOF.
        raise BadEvent("not a Wyoming event (invalid JSON)")
    if not isinstance(event.type, str) or not isinstance(event.data, dict):
        raise BadEvent("an event needs a string 'type' and an object 'data'")
    return event


def event_bytes(event: Event) -> bytes:
    """The bytes the ``wyoming`` package frames ``event`` into."""
    buf = io.BytesIO()
    write_event(event, buf)
    return buf.getvalue()


def error_event(exc: ServiceError) -> Event:
    return Error(text=exc.message, code=exc.code).event()


def chunk_text(event: Event) -> str:
    """``synthesize-chunk``'s text (ServiceError when it is not a string)."""
    text = event.data.get("text", "")
    if not isinstance(text, str):
        raise ServiceError(ErrorCode.BAD_REQUEST, "'text' must be a string")
    return text


def info_event(service: Service) -> Event:
    """``info``: one TTS program, ``ttsd``, with every loaded voice."""
    info = service.info()
    voices = [
        TtsVoice(
            name=v["name"],
            attribution=_PIPER,
            installed=True,
            description=f"{v['name']} ({v['sample_rate']} Hz)",
            version=None,
            languages=[v["language"]],
            speakers=[TtsVoiceSpeaker(name=str(s)) for s in v["speakers"]] or None,
        )
        for v in info["voices"]
    ]
    program = TtsProgram(
        name="ttsd",
        attribution=_TTSD,
        installed=True,
        description="ttsd: local streaming text-to-speech",
        version=__version__,
        voices=voices,
        supports_synthesize_streaming=True,
    )
    return Info(tts=[program]).event()
