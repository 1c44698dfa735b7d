"""``sd_ttsd``: a speech-dispatcher output module that speaks through a running ttsd.

speech-dispatcher starts it as ``sd_ttsd CONFIG`` and talks to it on stdin/stdout
(:mod:`appliance.clients.speechd.wire`).  The module holds one protocol-v1 connection to ttsd
(:class:`appliance.clients.client.AsyncClient`) and never loads a model.  Audio goes back to the
server as ``705`` blocks as ttsd streams it (server audio), so speech-dispatcher plays it
and mixes it with its sound icons.

One asyncio loop: a reader task parses commands (:class:`Module`, here); each message is a
:class:`~appliance.clients.speechd.speech.Speech` task; the connection to ttsd is
:class:`~appliance.clients.speechd.link.TtsdLink`; what a message asks ttsd for is
:mod:`appliance.clients.speechd.options`.  Everything written to stdout goes through one
non-blocking pipe transport (:mod:`appliance.clients.speechd.pipes`), so a server that is
busy playing never stalls the reading of ``STOP``.  ``STOP`` answers ``703`` at once, from
the reader, and marks the speech finished: a finished speech writes nothing more, so no
audio of a stopped message can follow its ``703``.
Bounds: a message's text over :data:`MAX_MESSAGE_BYTES` is cut; a command line is bounded by
:data:`~appliance.clients.speechd.pipes.MAX_LINE_BYTES`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from appliance.clients.client import TtsdError, resolve_socket
from appliance.clients.speechd import wire
from appliance.clients.speechd.config import ConfigError, ModuleConfig, load
from appliance.clients.speechd.link import TtsdLink
from appliance.clients.speechd.options import listed_names, request_options
from appliance.clients.speechd.pipes import LineReader, Output
from appliance.clients.speechd.speech import Speech

log = logging.getLogger("sd_ttsd")

MAX_MESSAGE_BYTES = 4 << 20
"""A message's text beyond this is dropped (and logged): ~4 MB is hours of speech."""
SPD_LEVELS = {0: logging.ERROR, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}


def _spd_level(level: int) -> int:
    return SPD_LEVELS.get(level, logging.DEBUG)


def _speechd_language(language: str) -> str:
    return language.replace("_", "-")


class Module:
    """speech-dispatcher's commands: settings, the message being spoken, the replies.

    Runs on the module's one loop: :meth:`serve` reads commands; each message is a
    :class:`~appliance.clients.speechd.speech.Speech` task; the connection to ttsd is
    :attr:`link`."""

    def __init__(self, cfg: ModuleConfig, out: Output, socket_path: str) -> None:
        self.cfg = cfg
        self.out = out
        self.link = TtsdLink(socket_path)
        self.settings: dict[str, Any] = {}
        self.speech: Speech | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def request_options(self) -> dict[str, Any]:
        """The request options for the settings now."""
        return request_options(self.cfg, self.settings, self.link.info)

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
            await self.link.close()

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
        speech = Speech(self.link, self.out, self.request_options, text, kind)
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
            await self.link.refresh_info()
        except TtsdError as exc:
            log.error("cannot list voices: %s", exc)
        voices = self.link.voices
        if not voices:
            self.out.line(wire.CANT_LIST_VOICES)
            return
        rows = [
            f"{name}\t{_speechd_language(str(v.get('language') or 'none'))}\tnone"
            for v in voices
            for name in listed_names(v)
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


async def _init(module: Module) -> str:
    """Connect and describe the daemon; raises :class:`TtsdError` when it is not there."""
    link = module.link
    await link.ensure()
    names_ = ", ".join(str(v["name"]) for v in link.voices) or "no voices"
    backend = link.info.get("backend", "?")
    return f"ttsd ({backend}) at {link.socket_path}: {names_}; pitch is not supported"


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
