"""``sd_ttsd``: a speech-dispatcher output module that speaks through a running ttsd.

speech-dispatcher starts it as ``sd_ttsd CONFIG`` and talks to it on stdin/stdout
(:mod:`appliance.clients.speechd.wire`).  The module holds one protocol-v1 connection to ttsd
(:class:`appliance.clients.client.AsyncClient`) and never loads a model.  Audio goes back to the
server as ``705`` blocks as ttsd streams it (server audio), so speech-dispatcher plays it
and mixes it with its sound icons.

One asyncio loop: a reader task parses commands; each message is a :class:`Speech` task.
Everything written to stdout goes through one non-blocking pipe transport, so a server
that is busy playing never stalls the reading of ``STOP``.  ``STOP`` answers ``703`` at
once, from the reader, and marks the speech finished: a finished speech writes nothing
more, so no audio of a stopped message can follow its ``703``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from appliance.clients.client import AsyncClient, TtsdError, resolve_socket
from appliance.clients.speechd import markup, names, wire
from appliance.clients.speechd.config import ConfigError, ModuleConfig, load

log = logging.getLogger("sd_ttsd")

MAX_LINE_BYTES = 1 << 20
"""A longer command line is cut (and logged); its rest is read and dropped."""
MAX_MESSAGE_BYTES = 4 << 20
"""A message's text beyond this is dropped (and logged): ~4 MB is hours of speech."""
BLOCK_MS = 200
"""Audio goes out in blocks of at most this much.  The server plays each block before it
reads the next, so a small block keeps what sits in the pipe (and is played after a STOP
the server has not yet passed on) short."""
PIPE_BYTES = 4096
"""stdout's pipe is shrunk to this (Linux ``F_SETPIPE_SZ``) for the same reason."""
F_SETPIPE_SZ = 1031

SPD_LEVELS = {0: logging.ERROR, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}


def _spd_level(level: int) -> int:
    return SPD_LEVELS.get(level, logging.DEBUG)


class Output:
    """stdout: replies, events and audio, written without ever blocking the loop."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    @classmethod
    async def open(cls, fd: int = 1) -> Output:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        pipe = os.fdopen(fd, "wb", buffering=0, closefd=False)
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(), pipe
        )
        # drain() then waits until everything written has gone into the pipe: audio is
        # never queued here, where a STOP could not take it back.
        transport.set_write_buffer_limits(high=0)
        return cls(asyncio.StreamWriter(transport, protocol, None, loop))

    def write(self, data: bytes) -> None:
        if not self._writer.transport.is_closing():
            self._writer.write(data)

    def line(self, text: str) -> None:
        self.write(wire.line(text))

    async def drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            pass  # the server went away; the reader sees EOF and ends the module

    def close(self) -> None:
        self._writer.close()


class LineReader:
    """stdin as lines without their newline; a line over ``limit`` is cut, never buffered."""

    def __init__(self, reader: asyncio.StreamReader, limit: int = MAX_LINE_BYTES) -> None:
        self._reader = reader
        self._limit = limit

    async def readline(self) -> bytes | None:
        """The next line, or ``None`` at end of input."""
        kept = bytearray()
        while True:
            try:
                data = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial and not kept:
                    return None
                data = exc.partial + b"\n"
            except asyncio.LimitOverrunError as exc:
                piece = await self._reader.readexactly(exc.consumed)
                room = self._limit - len(kept)
                if room > 0:
                    kept += piece[:room]
                continue
            room = self._limit - len(kept)
            if len(kept) + len(data) - 1 > self._limit:
                log.warning("a command line over %d bytes was cut", self._limit)
            kept += data[:-1][: max(room, 0)]
            return bytes(kept).rstrip(b"\r")


class Speech:
    """One message: ``701 BEGIN``, audio and marks, then exactly one of 702, 703, 704 —
    BEGIN always first, however soon the message is stopped."""

    def __init__(self, module: Module, text: str, kind: str) -> None:
        self.module = module
        self.text = text
        self.kind = kind
        self.finished = False
        self.pause_requested = False
        self.rid: int | None = None
        self.rate = 22050
        self.sent_audio = False
        self.begun = False
        self.task: asyncio.Task[None] | None = None

    # -- writing: nothing gets out once the message has ended
    def begin(self) -> None:
        """``701 BEGIN``, once, before anything else of the message.  Sent when the message
        is taken, not when its task first runs: a STOP or the next SPEAK read before then
        ended the message without its BEGIN, and speech-dispatcher waits for BEGIN."""
        if not self.begun:
            self.begun = True
            self.module.out.line(wire.BEGIN)

    def emit(self, data: bytes) -> None:
        if not self.finished:
            self.module.out.write(data)

    def finish(self, event: str) -> bool:
        if self.finished:
            return False
        self.begin()
        self.module.out.line(event)
        self.finished = True
        return True

    def stop(self) -> None:
        """``STOP``: 703 now, then cancel the ttsd request (no wait for it)."""
        if self.finish(wire.STOP):
            self._cancel_request()

    def _cancel_request(self) -> None:
        if self.rid is not None and self.module.client is not None:
            self.module.spawn(self.module.cancel(self.module.client, self.rid))
            self.rid = None  # once is enough

    # -- the work
    async def run(self) -> None:
        self.begin()
        try:
            await self._speak()
        except TtsdError as exc:
            if exc.code in ("disconnected", "connect"):
                log.error("lost ttsd (%s); the message ends here, the next one reconnects", exc)
                await self.module.drop_client()
                self.finish(wire.STOP)
            else:
                # Nothing to say for this text (empty after cleaning, a script the voice
                # cannot speak, …): the message is over, like one that was spoken.
                log.warning("ttsd refused the message: %s", exc)
                self.finish(wire.END)
            return
        except asyncio.CancelledError:
            self.finish(wire.STOP)
            raise
        except Exception:  # a bug here must still end the message, or the server waits for ever
            log.exception("speaking failed")
            self.finish(wire.STOP)
            return
        self.finish(wire.END)

    async def _speak(self) -> None:
        m = self.module
        if self.kind == "text" and not self.text.lstrip().startswith("<"):
            # Not SSML (speech-dispatcher 0.11 always wraps in <speak>; other callers of
            # the module protocol may not): plain text, no markup, no entities.
            items: list[markup.Item] = [markup.Text(self.text)]
        elif self.kind == "text":
            if m.ssml_supported is not False and m.fits_one_request(self.text):
                try:
                    await self._request(self.text, ssml=True)
                    return
                except TtsdError as exc:
                    # Refused before any audio: a daemon without SSML, or SSML it will
                    # not take (not well-formed, too long).  The module's own scanner is
                    # lenient and keeps the marks; a daemon without SSML is remembered.
                    if self.sent_audio or exc.code not in ("bad_request", "text_too_long"):
                        raise
                    if "text_format" in exc.message:
                        m.ssml_supported = False
                        log.info("this ttsd takes no SSML; the module keeps the marks (%s)", exc)
                    else:
                        log.info("ttsd refused the SSML (%s); speaking it as plain text", exc)
            items = markup.to_items(self.text)
        elif self.kind == "char":
            items = [markup.Text(names.char_words(self.text))]
        else:
            items = [markup.Text(names.key_words(self.text))]
        for item in items:
            if self.finished:
                return
            if isinstance(item, markup.MarkItem):
                await self._mark(item.name)
                continue
            for piece in markup.split_long(item.text, m.max_text_chars):
                if self.finished:
                    return
                await self._request(piece, ssml=False)

    async def _request(self, text: str, ssml: bool) -> None:
        m = self.module
        client = await m.ensure_client()
        opts = m.request_options()
        if ssml:
            opts["text_format"] = "ssml"
        self.rid = None
        events = client.synthesize(text, **opts)
        try:
            async for ev in events:
                if ev.get("event") == "start" and isinstance(ev.get("id"), int):
                    self.rid = ev["id"]
                if self.finished:
                    # Stopped or paused before ttsd's first answer: cancel it now.
                    self._cancel_request()
                    return
                kind = ev.get("event")
                if kind == "start":
                    self.rate = int(ev.get("sample_rate") or self.rate)
                elif kind == "chunk":
                    await self._chunk(ev)
                    if self.finished:
                        self._cancel_request()
                        return
                elif kind == "end":
                    for mark in _marks(ev):
                        await self._mark(mark[1])
                    break
        finally:
            # Leaving early: let the client forget the request now, not at garbage collection.
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        self.rid = None

    async def _chunk(self, ev: dict[str, Any]) -> None:
        pcm = bytes(ev.get("audio") or b"")
        start_ms = float(ev.get("offset_ms") or 0.0)
        pos = 0
        for offset_ms, name in _marks(ev):
            cut = round((offset_ms - start_ms) * self.rate / 1000.0) * 2
            cut = max(pos, min(len(pcm) - len(pcm) % 2, cut))
            await self._audio(pcm[pos:cut])
            pos = cut
            await self._mark(name)
            if self.finished:
                return
        await self._audio(pcm[pos:])

    async def _audio(self, pcm: bytes) -> None:
        step = max(2, self.rate * BLOCK_MS // 1000 * 2)
        for i in range(0, len(pcm) - 1, step):
            await self.module.out.drain()
            if self.finished:
                return
            self.emit(wire.AudioBlock(pcm[i : i + step], self.rate).encode())
            self.sent_audio = True

    async def _mark(self, name: str) -> None:
        await self.module.out.drain()
        self.emit(wire.index_mark(name))
        if self.pause_requested and self.finish(wire.PAUSE):
            self._cancel_request()


def _marks(ev: dict[str, Any]) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    for mark in ev.get("marks") or ():
        if isinstance(mark, dict) and isinstance(mark.get("name"), str):
            offset = mark.get("offset_ms")
            out.append((float(offset) if isinstance(offset, int | float) else 0.0, mark["name"]))
    return sorted(out, key=lambda m: m[0])


def _speechd_language(language: str) -> str:
    return language.replace("_", "-")


class Module:
    """The module's state: settings, the ttsd connection, the message being spoken."""

    def __init__(self, cfg: ModuleConfig, out: Output, socket_path: str) -> None:
        self.cfg = cfg
        self.out = out
        self.socket_path = socket_path
        self.client: AsyncClient | None = None
        self.info: dict[str, Any] = {}
        self.settings: dict[str, Any] = {}
        self.speech: Speech | None = None
        self.ssml_supported: bool | None = None
        self._connect_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- ttsd
    async def ensure_client(self) -> AsyncClient:
        async with self._connect_lock:
            if self.client is not None and self.client.connected:
                return self.client
            if self.client is not None:
                await self.drop_client()
            client = await AsyncClient.connect(self.socket_path)
            try:
                self.info = await client.request("info")
            except TtsdError:
                await client.close()
                raise
            self.client = client
            self.ssml_supported = None  # a restarted daemon may be a newer one
            log.info("connected to ttsd (%s) at %s", self.info.get("backend"), self.socket_path)
            return client

    async def drop_client(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.close()

    async def cancel(self, client: AsyncClient, rid: int) -> None:
        try:
            await client.request("cancel", target=rid)
        except TtsdError as exc:
            log.debug("cancel %d: %s", rid, exc)  # it had already ended

    def spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def voices(self) -> list[dict[str, Any]]:
        return [v for v in self.info.get("voices") or () if isinstance(v, dict) and "name" in v]

    @property
    def max_text_chars(self) -> int:
        limits = self.info.get("limits") or {}
        return max(1, int(limits.get("max_text_chars") or 20000))

    def fits_one_request(self, text: str) -> bool:
        limits = self.info.get("limits") or {}
        max_bytes = int(limits.get("max_message_bytes") or 65536)
        # Room for the other fields of the request map.
        return len(text) <= self.max_text_chars and len(text.encode()) <= max_bytes - 1024

    def resolve_voice(self) -> str | None:
        names_ = [str(v["name"]) for v in self.voices]
        wanted = self.settings.get("synthesis_voice")
        if wanted in names_:
            return str(wanted)
        name, speaker = _voice_speaker(wanted)
        if speaker is not None and name in names_:
            return name
        language = self.settings.get("language")
        mapped = self.cfg.voice_for(language, self.settings.get("voice"))
        if mapped in names_:
            return mapped
        default = self.cfg.default_voice if self.cfg.default_voice in names_ else None
        if language:
            lang = str(language).lower().replace("_", "-")
            for exact in (True, False):
                matching = [
                    str(v["name"])
                    for v in self.voices
                    if _lang_matches(str(v.get("language", "")), lang, exact)
                ]
                if matching:
                    daemon_default = self.info.get("default_voice")
                    for preferred in (default, daemon_default):
                        if preferred in matching:
                            return str(preferred)
                    return matching[0]
        return default

    def request_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"format": "s16le", "mode": self.cfg.mode}
        if self.cfg.deterministic:
            # A screen reader says the same phrases again and again: the same audio each time.
            opts["deterministic"] = True
        voice = self.resolve_voice()
        if voice:
            opts["voice"] = voice
            name, speaker = _voice_speaker(self.settings.get("synthesis_voice"))
            if speaker is not None and name == voice:
                opts["speaker"] = speaker
        rate = self.settings.get("rate")
        if isinstance(rate, int) and rate:
            # −100…0 onto 0.5×…1×, 0…100 onto 1×…4× (Orca's rate 100 is 4×; past 1.25×
            # ttsd time-stretches), 0 the voice's own pace.
            top = 4.0 if rate > 0 else 2.0
            opts["speed"] = round(min(4.0, max(0.5, top ** (rate / 100.0))), 3)
        volume = self.settings.get("volume")
        if isinstance(volume, int):
            # speech-dispatcher's default is 100, its loudest: the voice's own level.
            opts["volume"] = round((volume + 100) / 200.0, 3)
        return opts

    # -- commands
    async def serve(self, lines: LineReader) -> int:
        try:
            while True:
                raw = await lines.readline()
                if raw is None:
                    log.info("speech-dispatcher closed the pipe")
                    return 0
                command = raw.decode("utf-8", "replace").strip()
                handler = self._handlers().get(command)
                if handler is not None:
                    await handler(lines)
                elif command.startswith("DEBUG"):
                    self._debug(command)
                elif command == "QUIT":
                    self._stop_speech()
                    self.out.line(wire.QUIT_OK)
                    await self.out.drain()
                    return 0
                elif command:
                    self.out.line(wire.UNKNOWN_COMMAND)
        finally:
            self._stop_speech()
            for task in list(self._tasks):
                task.cancel()
            await self.drop_client()

    def _handlers(self) -> dict[str, Callable[[LineReader], Awaitable[None]]]:
        return {
            "SPEAK": lambda r: self._speak(r, "text"),
            "CHAR": lambda r: self._speak(r, "char"),
            "KEY": lambda r: self._speak(r, "key"),
            "SOUND_ICON": lambda r: self._speak(r, "icon"),
            "STOP": self._stop,
            "PAUSE": self._pause,
            "LIST VOICES": self._list_voices,
            "SET": self._set,
            "AUDIO": self._audio,
            "LOGLEVEL": self._loglevel,
        }

    async def _read_block(self, lines: LineReader) -> list[bytes] | None:
        """Data lines up to the lone ``.``, dot-unstuffed; ``None`` at end of input."""
        out: list[bytes] = []
        size = 0
        dropped = False
        while True:
            raw = await lines.readline()
            if raw is None:
                return None
            if raw == b".":
                if dropped:
                    log.warning("a message over %d bytes was cut", MAX_MESSAGE_BYTES)
                return out
            data = wire.unstuff(raw)
            if size + len(data) > MAX_MESSAGE_BYTES:
                dropped = True
                continue
            size += len(data) + 1
            out.append(data)

    async def _speak(self, lines: LineReader, kind: str) -> None:
        # A new message while one is speaking: speech-dispatcher sends STOP first, but if
        # this SPEAK overtook it, the old message ends (703) before anything is answered,
        # so no audio of it can come between this command's replies.
        self._stop_speech()
        self.out.line(wire.RECEIVING_MESSAGE)
        block = await self._read_block(lines)
        if block is None:
            return
        text = b"\n".join(block).decode("utf-8", "replace")
        log.debug("%s: %r", kind, text[:200])
        if not text.strip() and not (kind == "char" and text):
            self.out.line(wire.CANT_SPEAK)
            return
        if kind != "text" and len(block) > 1:
            self.out.line(wire.MORE_THAN_ONE_LINE)
            return
        self.out.line(wire.SPEAKING)
        if kind == "icon":
            # The server plays sound icons itself, from its own icon directory.
            self.out.write(
                wire.line(wire.BEGIN) + wire.sound_icon(text.strip()) + wire.line(wire.END)
            )
            return
        speech = Speech(self, text, kind)
        speech.begin()
        self.speech = speech
        speech.task = asyncio.create_task(speech.run())
        self._tasks.add(speech.task)
        speech.task.add_done_callback(self._speech_done)

    def _speech_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("speech failed", exc_info=task.exception())

    def _stop_speech(self) -> None:
        if self.speech is not None:
            self.speech.stop()
            self.speech = None

    async def _stop(self, _lines: LineReader) -> None:
        # No reply of its own: 703 is the reply, and only when something was speaking
        # (a stray 703 would end the server's *next* message).
        self._stop_speech()

    async def _pause(self, _lines: LineReader) -> None:
        if self.speech is not None and not self.speech.finished:
            self.speech.pause_requested = True

    async def _list_voices(self, _lines: LineReader) -> None:
        try:
            client = await self.ensure_client()
            self.info = await client.request("info")
        except TtsdError as exc:
            log.error("cannot list voices: %s", exc)
        voices = self.voices
        if not voices:
            self.out.line(wire.CANT_LIST_VOICES)
            return
        rows = [
            f"{name}\t{_speechd_language(str(v.get('language') or 'none'))}\tnone"
            for v in voices
            for name in _listed_names(v)
        ]
        self.out.write(wire.multiline(200, rows, wire.VOICE_LIST_SENT))

    async def _params(self, lines: LineReader, receiving: str) -> list[tuple[str, str]] | None:
        """A settings block: ``None`` when it was bad (the error already answered)."""
        self.out.line(receiving)
        block = await self._read_block(lines)
        if block is None:
            return None
        pairs: list[tuple[str, str]] = []
        for raw in block:
            try:
                pairs.append(wire.parse_pair(raw))
            except ValueError:
                self.out.line(wire.BAD_SYNTAX)
                return None
        return pairs

    async def _set(self, lines: LineReader) -> None:
        # The server sets up the next message only once the last has ended; a SET while
        # speaking means a STOP was overtaken: end the old message as for SPEAK.
        self._stop_speech()
        pairs = await self._params(lines, wire.RECEIVING_SETTINGS)
        if pairs is None:
            return
        try:
            settings = wire.Settings.from_pairs(pairs)
        except ValueError as exc:
            log.warning("SET: %s", exc)
            self.out.line(wire.BAD_PARAM)
            return
        for name, _ in pairs:
            if name in wire.Settings.__dataclass_fields__:
                self.settings[name] = getattr(settings, name)
        if self.settings.get("pitch"):
            log.debug("pitch is not supported by ttsd voices; ignored")
        self.out.line(wire.SETTINGS_RECEIVED)

    async def _audio(self, lines: LineReader) -> None:
        pairs = await self._params(lines, wire.RECEIVING_AUDIO_SETTINGS)
        if pairs is None:
            return
        method = dict(pairs).get("audio_output_method")
        if method == "server":
            self.out.line(wire.AUDIO_INITIALIZED)
            return
        reason = (
            f"speech-dispatcher offered audio_output_method={method}; sd_ttsd only sends "
            "its audio to the server (speech-dispatcher 0.10 or newer plays it)"
        )
        log.error("%s", reason)
        self.out.write(wire.multiline(300, [reason], wire.MODULE_ERROR))

    async def _loglevel(self, lines: LineReader) -> None:
        pairs = await self._params(lines, wire.RECEIVING_LOGLEVEL)
        if pairs is None:
            return
        try:
            level = int(dict(pairs).get("log_level", "3"))
        except ValueError:
            self.out.line(wire.BAD_PARAM)
            return
        logging.getLogger("sd_ttsd").setLevel(_spd_level(max(0, min(5, level))))
        self.out.line(wire.LOGLEVEL_SET)

    def _debug(self, command: str) -> None:
        words = command.split()
        if len(words) >= 2 and words[1] == "OFF":
            logging.getLogger("sd_ttsd").setLevel(_spd_level(self.cfg.log_level))
            self.out.line("200 OK DEBUGGING OFF")
        elif len(words) >= 2 and words[1] == "ON":
            # The file speech-dispatcher names is its own debug directory; the module's
            # log already goes to stderr, which the server collects.
            logging.getLogger("sd_ttsd").setLevel(logging.DEBUG)
            self.out.line("200 OK DEBUGGING ON")
        else:
            self.out.line(wire.BAD_SYNTAX)


SPEAKERS_LISTED = 32
"""``LIST VOICES`` shows a multi-speaker voice as ``NAME:SPEAKER``, one row per speaker,
for its first this many speakers (libritts_r has 904: a menu of them helps no one); any
other speaker is still chosen by setting ``NAME:SPEAKER`` as the synthesis voice."""


def _listed_names(voice: dict[str, Any]) -> list[str]:
    speakers = voice.get("speakers") or []
    if not isinstance(speakers, list) or len(speakers) < 2:
        return [str(voice["name"])]
    return [f"{voice['name']}:{s}" for s in speakers[:SPEAKERS_LISTED]]


def _voice_speaker(wanted: object) -> tuple[str | None, str | None]:
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


async def _init(module: Module) -> str:
    """Connect and describe the daemon; raises :class:`TtsdError` when it is not there."""
    await module.ensure_client()
    info = module.info
    names_ = ", ".join(str(v["name"]) for v in module.voices) or "no voices"
    backend = info.get("backend", "?")
    return f"ttsd ({backend}) at {module.socket_path}: {names_}; pitch is not supported"


async def amain(config_path: str | None) -> int:
    try:
        cfg = load(config_path)
    except ConfigError as exc:
        cfg = None
        config_error = str(exc)
    logging.basicConfig(
        stream=sys.stderr, format="sd_ttsd: %(levelname)s: %(message)s", level=logging.WARNING
    )
    logging.getLogger("sd_ttsd").setLevel(_spd_level(cfg.log_level if cfg else 3))
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024)
    stdin = os.fdopen(0, "rb", buffering=0, closefd=False)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    out = await Output.open(1)
    lines = LineReader(reader)
    first = await lines.readline()
    if first != b"INIT":
        log.error("expected INIT from speech-dispatcher, got %r", (first or b"")[:80])
        return 3
    if cfg is None:
        out.write(wire.multiline(399, [config_error], wire.INIT_FAILED))
        await out.drain()
        return 1
    socket_path = resolve_socket(cfg.socket)
    module = Module(cfg, out, socket_path)
    try:
        status = await _init(module)
    except TtsdError as exc:
        reason = (
            f"ttsd is not running at {socket_path} ({exc.message}); start it "
            "(systemctl start ttsd, or ttsd serve) or set TtsdSocket in ttsd.conf"
        )
        log.error("%s", reason)
        out.write(wire.multiline(399, [reason], wire.INIT_FAILED))
        await out.drain()
        return 1
    out.write(wire.multiline(299, [status], wire.INIT_OK))
    code = await module.serve(lines)
    await out.drain()
    out.close()
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sd_ttsd",
        description="speech-dispatcher output module speaking through ttsd "
        "(started by speech-dispatcher, which talks to it on stdin/stdout)",
    )
    parser.add_argument("config", nargs="?", help="module configuration (ttsd.conf)")
    args = parser.parse_args(argv)
    return asyncio.run(amain(args.config))


if __name__ == "__main__":
    raise SystemExit(main())
