"""The Wyoming door: Home Assistant (and any Wyoming client) speaks through ttsd.

Events and their framing come from the ``wyoming`` package (``async_read_event`` /
``async_write_event``); this module only maps them onto the service core:

- ``describe`` → ``info`` (one TTS program, every loaded voice), answered by the
  connection's reader at once, whatever the inference workers are doing.
- ``synthesize`` → one request: ``audio-start``, ``audio-chunk``\\* as the chunks are
  made, ``audio-stop``.
- ``synthesize-start`` → ``synthesize-chunk``\\* → ``synthesize-stop``: one request with
  text that streams in (the core's ``text_stream``), so audio starts when the core's
  text-stream rule releases the first segment; ``synthesize-stopped`` after the last
  audio.  The compatibility ``synthesize`` a client sends inside a stream is ignored.
- Errors are ``error`` events (``text``, ``code`` = the core's error code); the
  connection goes on.  Unknown event types are ignored, as the protocol says.

Requests on one connection are answered in order (Wyoming events carry no request id):
one worker task per connection runs them one after the other; the reader keeps
reading, so ``describe`` and the text of an open stream never wait behind audio.

Bounds: the ``wyoming`` reader would read whatever length a header declares, so the
connection's :class:`asyncio.StreamReader` is :class:`_BoundedReader`: a header line,
``data_length`` and ``payload_length`` are each capped at ``limits.max_message_bytes``
(64 KiB) *before* anything is read, and the connection is closed with
``frame_too_large``.  Bytes that are not a Wyoming event close it with ``bad_request``.
Connection limits, idle and frame timeouts, the output bound and ``client_too_slow``
are protocol v1's (``limits.*``); peers of a ``unix://`` socket are checked as
protocol v1's are; ``tcp://`` clients must come from ``wyoming.allowed_networks``.
A client that disconnects (EOF) has its work cancelled at once.  While the daemon drains,
the listener stays open and a newcomer gets ``error`` (``shutting_down``), then the close.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsIndex

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice, TtsVoiceSpeaker
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)

from appliance import __version__
from appliance.core.service import Service, Stream
from appliance.doors.net import (
    ClientSlots,
    ClientTooSlow,
    FrameTimeout,
    IdleTimeout,
    Outbox,
    ReadTimer,
    authorize_peer,
    bind_unix_socket,
    fds_short,
    is_loopback_network,
    peer_ip,
    peer_of,
    privileged,
    read_to_eof,
    refuse,
    remove_own_socket,
)
from appliance.doors.pcm import PcmEncoder
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config, WyomingConfig, wyoming_endpoint
from appliance.ops.logsetup import Throttle
from appliance.speech import Chunk, SpeechRequest

if TYPE_CHECKING:
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

log = logging.getLogger(__name__)

SAMPLE_WIDTH = 2
"""16-bit PCM: what Home Assistant and every Wyoming satellite play."""
SERVICE_TYPE = "_wyoming._tcp.local."
_PIPER = Attribution(name="rhasspy", url="https://github.com/rhasspy/piper")
_TTSD = Attribution(name="ttsd", url="")
"""ttsd has no public home page to point at (yet)."""


_MAX_SPEAKER_DIGITS = 9
"""A speaker id beyond this many digits names no voice's speaker (they have a few hundred)."""

_MAX_NAME_CHARS = 256
"""Voice, language and speaker names: as protocol v1 caps them."""

_THROTTLE = Throttle()
"""Log lines about failing requests: one per kind every 10 s."""


class FrameTooLarge(Exception):
    """A header line or a declared length over the limit: the connection is closed."""


class BadEvent(Exception):
    """Bytes that are not a Wyoming event: the connection is closed."""


# ---------------------------------------------------------------- reading, bounded


class _BoundedReader(asyncio.StreamReader):
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


async def read_event(reader: _BoundedReader) -> Event | None:
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


# ---------------------------------------------------------------- messages


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
            meta = service.runtime.voice_meta.get(voice.name)
            if meta is None or speaker not in meta.info.speaker_id_map:
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


class _Collector:
    """Stands in for a stream writer to collect an event's bytes (for :func:`refuse`)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def writelines(self, data: Iterable[bytes]) -> None:
        self.parts.extend(data)

    async def drain(self) -> None:
        """Nothing waits: the bytes are only collected."""


async def event_bytes(event: Event) -> bytes:
    """The bytes the ``wyoming`` package frames ``event`` into."""
    collector = _Collector()
    await async_write_event(event, collector)  # type: ignore[arg-type]
    return b"".join(collector.parts)


def chunk_text(event: Event) -> str:
    text = event.data.get("text", "")
    if not isinstance(text, str):
        raise ServiceError(ErrorCode.BAD_REQUEST, "'text' must be a string")
    return text


def error_event(exc: ServiceError) -> Event:
    return Error(text=exc.message, code=exc.code).event()


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


# ---------------------------------------------------------------- zeroconf


def zeroconf_record(name: str, port: int, addresses: list[str]) -> AsyncServiceInfo:
    """The mDNS record Home Assistant discovers (``_wyoming._tcp.local.``)."""
    from zeroconf.asyncio import AsyncServiceInfo

    return AsyncServiceInfo(
        SERVICE_TYPE,
        f"{name}.{SERVICE_TYPE}",
        parsed_addresses=addresses,
        port=port,
        properties={"version": __version__, "program": "ttsd"},
    )


def advertised_address(host: str) -> str | None:
    """The address to advertise for a listener bound to ``host`` (None: not reachable
    from elsewhere).  A wildcard bind advertises the address of the default route's
    interface (a UDP connect sends nothing)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.is_loopback:
        return None
    if not ip.is_unspecified:
        return host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("224.0.0.251", 5353))
            return str(s.getsockname()[0])
        except OSError:
            return None


# ---------------------------------------------------------------- the door


class WyomingDoor:
    """A Wyoming server on ``wyoming.uri``, on the shared service core."""

    name = "wyoming"

    def __init__(self, service: Service, uri: str) -> None:
        self.service = service
        self.kind, self.host, self.port = wyoming_endpoint(uri)
        self.connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.slots = ClientSlots()
        self._server: asyncio.AbstractServer | None = None
        self._socket_gid: int | None = None
        self._socket_id: tuple[int, int] | None = None
        self._zeroconf: AsyncZeroconf | None = None
        self.draining = False
        """The daemon is stopping: newcomers are answered ``shutting_down``."""
        self._seq = 0
        service.add_door(self.name, lambda: len(self.connections))

    @property
    def config(self) -> Config:
        return self.service.runtime.config

    @property
    def wcfg(self) -> WyomingConfig:
        return self.config.wyoming

    @property
    def uri(self) -> str:
        if self.kind == "unix":
            return f"unix://{self.host}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        limit = self.config.limits.max_message_bytes

        def protocol() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(_BoundedReader(limit), self._accept)

        if self.kind == "tcp":
            self._server = await loop.create_server(protocol, self.host, self.port)
            # Port 0 means "any": report the one we got.
            self.port = int(self._server.sockets[0].getsockname()[1])
            if not all(is_loopback_network(n) for n in self.wcfg.allowed_networks):
                log.warning(
                    "wyoming: clients from %s may connect; Wyoming has no authentication",
                    ", ".join(self.wcfg.allowed_networks),
                )
        else:
            path = Path(self.host)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._server, st = await bind_unix_socket(
                path,
                self.wcfg.socket_mode,
                lambda p: loop.create_unix_server(protocol, p),
            )
            self._socket_gid, self._socket_id = st.st_gid, (st.st_dev, st.st_ino)
        log.info("wyoming: listening on %s", self.uri)
        if self.wcfg.zeroconf:
            await self._advertise()

    async def _advertise(self) -> None:
        if self.kind != "tcp":
            log.warning("wyoming.zeroconf: only a tcp:// listener can be advertised")
            return
        address = advertised_address(self.host)
        if address is None:
            log.warning("wyoming.zeroconf: %s is not reachable from other hosts", self.host)
            return
        try:
            from zeroconf.asyncio import AsyncZeroconf
        except ImportError:
            log.warning("wyoming.zeroconf: the zeroconf package is not installed; not advertised")
            return
        name = self.wcfg.zeroconf_name or f"ttsd-{socket.gethostname()}"[:63]
        record = zeroconf_record(name, self.port, [address])
        self._zeroconf = AsyncZeroconf()
        try:
            await self._zeroconf.async_register_service(record)
        except Exception as exc:  # mDNS is a convenience: serving goes on without it
            log.warning("wyoming.zeroconf: not advertised: %s", exc)
            return
        log.info("wyoming.zeroconf: advertised %s at %s:%d", name, address, self.port)

    async def wait_idle(self, deadline: float) -> None:
        """Nothing outlives the core's streams here: a connection's output is its own."""

    def close_listener(self) -> None:
        """The drain begins: the listener stays open so that a newcomer is told why
        (``shutting_down``) rather than refused; :meth:`close` shuts it."""
        self.draining = True

    async def close(self) -> None:
        self.draining = True
        if self._server is not None:
            self._server.close()
        if self._zeroconf is not None:
            with contextlib.suppress(Exception):
                await self._zeroconf.async_close()
            self._zeroconf = None
        for c in list(self.connections):
            c.disconnect()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)
        if self.kind == "unix" and self._socket_id is not None:
            with contextlib.suppress(OSError):
                remove_own_socket(Path(self.host), self._socket_id)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert isinstance(reader, _BoundedReader)
        self._seq += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        conn = _Connection(self, reader, writer, self._seq)
        try:
            await conn.handle()
        except Exception:  # a bug in one connection must not reach the listener
            log.exception("wyoming connection %d failed", conn.number)
            conn.disconnect()

    async def admit(self, writer: asyncio.StreamWriter) -> tuple[object, bool] | ServiceError:
        """(the key connections are counted by, privileged) or why the peer is refused."""
        sock = writer.get_extra_info("socket")
        if self.kind == "unix":
            peer = peer_of(sock) if sock is not None else None
            reason = await authorize_peer(peer, self.wcfg, self._socket_gid)
            if reason is not None:
                return ServiceError(ErrorCode.UNAUTHORIZED, reason)
            key: object = ("uid", peer.uid if peer is not None else -1)
            return key, privileged(peer)
        if fds_short(sock, self.config.limits.reserved_fds):
            # Descriptors are kept for the Unix socket's reserved connections.
            return ServiceError(ErrorCode.TOO_MANY_CONNECTIONS, "file descriptors are short")
        ip = peer_ip(writer.get_extra_info("peername"))
        if ip is None:
            return ServiceError(ErrorCode.UNAUTHORIZED, "peer address unavailable")
        if not any(ip in ipaddress.ip_network(n, strict=False) for n in self.wcfg.allowed_networks):
            return ServiceError(ErrorCode.UNAUTHORIZED, f"{ip} is not in allowed_networks")
        return ("host", str(ip)), False


@dataclass
class _Job:
    """One request of a connection, in the order it arrived."""

    message: SynthesizeMessage | None = None
    error: ServiceError | None = None
    """Reported in its turn instead of running (a request that could not be parsed)."""
    stream: Stream | None = None
    early: list[str] = field(default_factory=list)
    """Text of a stream that arrived before it was opened (bounded: max_text_chars)."""
    early_chars: int = 0
    stopped: bool = False
    dead: bool = False
    """Refused or failed: text that still arrives for it is dropped."""
    cancelled: bool = False

    def add_text(self, text: str, max_chars: int) -> None:
        if self.dead:
            return
        if self.stream is not None:
            if self.stream.takes_text:
                # A failure (text_too_long …) ends the stream through run().
                with contextlib.suppress(ServiceError):
                    self.stream.append(text)
            return
        self.early_chars += len(text)
        if self.early_chars > max_chars:
            self.early.clear()
            self.dead = True
            self.error = ServiceError(
                ErrorCode.TEXT_TOO_LONG,
                f"text has more than {max_chars} characters; the limit is {max_chars}",
            )
            return
        self.early.append(text)

    def stop(self) -> None:
        self.stopped = True
        if self.stream is not None and self.stream.takes_text:
            with contextlib.suppress(ServiceError):
                self.stream.finish()

    def cancel(self) -> None:
        self.cancelled = True
        if self.stream is not None:
            self.stream.cancel("disconnect")


class _Connection:
    def __init__(
        self,
        door: WyomingDoor,
        reader: _BoundedReader,
        writer: asyncio.StreamWriter,
        number: int,
    ) -> None:
        self.door = door
        self.service = door.service
        self.reader = reader
        self.writer = writer
        self.number = number
        self.jobs: deque[_Job] = deque()
        self.current: _Job | None = None
        self.text_job: _Job | None = None
        """The stream whose synthesize-chunk events are arriving."""
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self.outbox = Outbox(writer.transport, lambda: self.cfg.limits)
        self.timer = ReadTimer(lambda: self.cfg.limits)

    @property
    def cfg(self) -> Config:
        return self.door.config

    # ------------------------------------------------------------ lifecycle

    async def handle(self) -> None:
        door = self.door
        admitted = await door.admit(self.writer)
        if isinstance(admitted, ServiceError):
            log.warning("wyoming: refused connection: %s", admitted.message)
            await self._refuse(admitted)
            return
        key, is_privileged = admitted
        refused = door.slots.admit(self.cfg.limits, len(door.connections), key, is_privileged)
        if refused is not None:
            await self._refuse(refused)
            return
        if door.draining:  # holding its slot while it lingers: a flood stays bounded
            try:
                await self._refuse(ServiceError(ErrorCode.SHUTTING_DOWN, "shutting down"))
            finally:
                door.slots.give_back(key)
            return
        door.connections.add(self)
        self._worker = asyncio.create_task(self._work())
        try:
            await self._read_loop()
        finally:
            door.connections.discard(self)
            door.slots.give_back(key)
            self.disconnect()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([self._worker], timeout=5.0)

    async def _refuse(self, exc: ServiceError) -> None:
        self.service.record_error(exc.code)
        await self._say_and_close(exc)

    def disconnect(self) -> None:
        """The client is gone (or the daemon is closing): stop every request now."""
        for job in (self.current, *self.jobs, self.text_job):
            if job is not None:
                job.cancel()
        if self._worker is not None:
            self._worker.cancel()
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()  # the worker sees _closed and ends
        with contextlib.suppress(Exception):
            self.writer.close()

    def _too_slow(self) -> None:
        """The client left its output over the bound for ``client_too_slow_s``: drop what
        it has not read (a plain close would wait for it to read) and stop its work."""
        log.warning("wyoming connection %d: client_too_slow: closing", self.number)
        self.service.record_error(ErrorCode.CLIENT_TOO_SLOW)
        with contextlib.suppress(Exception):
            self.outbox.drop()
        self.disconnect()

    def _busy(self) -> bool:
        return self.current is not None or bool(self.jobs) or self.text_job is not None

    # ------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        self.reader.on_data = self.timer.began  # an event begun must end within frame_timeout_s
        while not self._closed:
            try:
                event = await self.timer.read(
                    lambda: read_event(self.reader), lambda: self.reader.partial, self._busy
                )
            except FrameTimeout as exc:
                await self._fatal(ServiceError(ErrorCode.BAD_REQUEST, str(exc)))
                return
            except IdleTimeout:
                log.info("wyoming connection %d idle: closing", self.number)
                return
            except FrameTooLarge as exc:
                await self._fatal(ServiceError(ErrorCode.FRAME_TOO_LARGE, str(exc)))
                return
            except BadEvent as exc:
                await self._fatal(ServiceError(ErrorCode.BAD_REQUEST, str(exc)))
                return
            except (ConnectionError, OSError):
                return
            if event is None:
                return  # EOF: the client is gone; its work stops (handle's finally)
            try:
                await self._dispatch(event)
            except ClientTooSlow:
                self._too_slow()
                return
            except (ConnectionError, OSError):
                return

    async def _fatal(self, exc: ServiceError) -> None:
        """Say why, then close (the byte stream cannot be resynchronised)."""
        log.warning("wyoming connection %d: %s: %s", self.number, exc.code, exc.message)
        self.service.record_error(exc.code)
        await self._say_and_close(exc)

    async def _say_and_close(self, exc: ServiceError) -> None:
        """The error, then the connection closed once the client has read it."""
        payload = await event_bytes(error_event(exc))
        await refuse(self.writer.transport, payload, read_to_eof(self.reader))
        self._close()

    async def _dispatch(self, event: Event) -> None:
        t = event.type
        if Describe.is_type(t):
            await self.send(info_event(self.service))
        elif Ping.is_type(t):
            text = event.data.get("text")
            await self.send(Pong(text=text if isinstance(text, str) else None).event())
        elif Synthesize.is_type(t):
            if self.text_job is not None:
                return  # the compatibility copy of the streamed text: ignored
            await self._enqueue(self._job(event))
        elif SynthesizeStart.is_type(t):
            if self.text_job is not None:
                await self._enqueue(
                    _Job(error=ServiceError(ErrorCode.BAD_REQUEST, "a text stream is open"))
                )
                return
            job = self._job(event)
            self.text_job = job
            if not await self._enqueue(job):
                job.dead = True
        elif SynthesizeChunk.is_type(t):
            if self.text_job is None:
                await self._enqueue(
                    _Job(
                        error=ServiceError(
                            ErrorCode.BAD_REQUEST, "synthesize-chunk without synthesize-start"
                        )
                    )
                )
                return
            try:
                text = chunk_text(event)
            except ServiceError as exc:
                self.service.record_error(exc.code)
                self.text_job.dead = True
                if self.text_job.stream is not None:
                    self.text_job.stream.fail(exc)
                else:
                    self.text_job.error = exc
                return
            self.text_job.add_text(text, self.cfg.limits.max_text_chars)
        elif SynthesizeStop.is_type(t):
            open_job, self.text_job = self.text_job, None
            if open_job is None:
                await self._enqueue(
                    _Job(
                        error=ServiceError(
                            ErrorCode.BAD_REQUEST, "synthesize-stop without synthesize-start"
                        )
                    )
                )
                return
            open_job.stop()
        else:
            log.debug("wyoming connection %d: ignoring %r", self.number, t[:64])

    def _job(self, event: Event) -> _Job:
        try:
            w = self.cfg.wyoming
            return _Job(message=SynthesizeMessage.from_event(event, w.text_format, w.text_start))
        except ServiceError as exc:
            self.service.record_error(exc.code)
            return _Job(error=exc, dead=True)

    async def _enqueue(self, job: _Job) -> bool:
        limit = self.cfg.limits.max_inflight_per_connection
        if len(self.jobs) + (self.current is not None) >= limit:
            exc = ServiceError(ErrorCode.TOO_MANY_REQUESTS, f"at most {limit} requests in flight")
            self.service.record_error(exc.code)
            # Said now, not in turn (the queue it would wait in is what is full), and by the
            # reader itself: while the client's output is over the bound, it stops reading,
            # so a client that sends and never reads cannot pile up error replies.
            await self.send(error_event(exc))
            return False
        self.jobs.append(job)
        self._wake.set()
        return True

    # ------------------------------------------------------------ writing

    async def send(self, event: Event, grace_s: float = 0.0) -> None:
        """Write one event; waits while the client's buffer is full.  ``grace_s``: audio
        the client still holds (a real-time player need not read until it has played)."""
        if self._closed or self.writer.is_closing():
            raise ConnectionResetError("connection closed")
        await self.outbox.guard(async_write_event(event, self.writer), grace_s)

    # ------------------------------------------------------------ requests, in order

    async def _work(self) -> None:
        while not self._closed:
            if not self.jobs:
                self._wake.clear()
                await self._wake.wait()
                continue
            job = self.jobs.popleft()
            self.current = job
            try:
                await self._run(job)
            except (ConnectionError, OSError):
                return
            except ClientTooSlow:
                self._too_slow()
                return
            except Exception as exc:
                # A bug on this request's path: it ends with internal, and the worker goes
                # on, so the next request on this connection is still answered.
                if not await self._internal(job, exc):
                    return
            finally:
                self.current = None
                self.timer.activity()

    async def _internal(self, job: _Job, exc: Exception) -> bool:
        """End ``job`` with ``internal`` (logged, the traceback once per 10 s); False when
        the connection is gone."""
        job.dead = True
        if job.stream is not None:
            job.stream.close()
        _THROTTLE.log(
            log,
            logging.ERROR,
            "internal",
            "wyoming connection %d: request failed (%s): ends with internal",
            self.number,
            type(exc).__name__,
            exc_info=exc,
        )
        self.service.record_error(ErrorCode.INTERNAL)
        try:
            await self.send(error_event(ServiceError(ErrorCode.INTERNAL, "internal error")))
        except ClientTooSlow:
            self._too_slow()
            return False
        except (ConnectionError, OSError):
            return False
        return True

    async def _run(self, job: _Job) -> None:
        if job.error is not None or job.message is None:
            if job.error is not None:
                await self.send(error_event(job.error))
            return
        if job.cancelled:
            return
        try:
            req = job.message.speech(self.service)
        except ServiceError as exc:
            job.dead = True
            self.service.record_error(exc.code)
            await self.send(error_event(exc))
            return
        try:
            stream = await self.service.open_stream(
                req, door="wyoming", label={"connection": self.number}
            )
        except ServiceError as exc:  # counted by the core
            job.dead = True
            await self.send(error_event(exc))
            return
        job.stream = stream
        try:
            if job.cancelled:
                stream.cancel("disconnect")
            if job.error is not None:  # its early text went over the limit meanwhile
                await self.send(error_event(job.error))
                return
            if req.text_stream:
                for text in job.early:
                    with contextlib.suppress(ServiceError):
                        stream.append(text)
                job.early.clear()
                if job.stopped:
                    with contextlib.suppress(ServiceError):
                        stream.finish()
            await self._stream(stream, job, req.text_stream)
        finally:
            stream.close()  # no-op once it ran

    async def _stream(self, stream: Stream, job: _Job, text_stream: bool) -> None:
        rate = stream.sample_rate
        encoder = PcmEncoder(rate, rate, "s16le")
        end_ms = [0.0]

        async def emit(chunk: Chunk) -> None:
            audio = encoder(chunk.samples, chunk.final)
            end_ms[0] = chunk.offset_ms + chunk.duration_ms
            event = AudioChunk(
                rate=rate,
                width=SAMPLE_WIDTH,
                channels=1,
                audio=audio,
                timestamp=round(chunk.offset_ms),
            ).event()
            await self.send(event, grace_s=stream.buffer_s())

        await self.send(AudioStart(rate=rate, width=SAMPLE_WIDTH, channels=1, timestamp=0).event())
        try:
            result = await stream.run(emit)
        except ServiceError as exc:
            if not job.cancelled:
                await self.send(error_event(exc))
            return
        if result.cancelled:
            return  # the client is gone: nothing to tell it
        await self.send(AudioStop(timestamp=round(end_ms[0])).event())
        if text_stream:
            await self.send(SynthesizeStopped().event())


__all__ = [
    "SERVICE_TYPE",
    "BadEvent",
    "FrameTooLarge",
    "SynthesizeMessage",
    "VoiceChoice",
    "WyomingDoor",
    "advertised_address",
    "info_event",
    "read_event",
    "zeroconf_record",
]
