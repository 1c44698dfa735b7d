"""One message of speech-dispatcher's, spoken through ttsd: ``701 BEGIN``, audio blocks
and index marks, then exactly one of ``702 END``, ``703 STOP``, ``704 PAUSE``.

A :class:`Speech` runs as one task on the module's loop.  It asks ttsd for SSML when the
daemon takes it (marks come back placed by ttsd), else for the text pieces between the
marks its own lenient scanner found (:mod:`appliance.clients.speechd.markup`).  Once it has
*finished* it writes nothing more, so no audio of a stopped message follows its ``703``.
Bounds: audio leaves in blocks of at most :data:`BLOCK_MS`, each after stdout has taken
the last; text goes in pieces of at most the daemon's ``max_text_chars``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.clients.client import TtsdError
from appliance.clients.speechd import markup, names, wire
from appliance.clients.speechd.link import TtsdLink
from appliance.clients.speechd.pipes import Output

log = logging.getLogger("sd_ttsd")

BLOCK_MS = 200
"""Audio goes out in blocks of at most this much.  The server plays each block before it
reads the next, so a small block keeps what sits in the pipe (and is played after a STOP
the server has not yet passed on) short."""


@dataclass(eq=False)
class Speech:
    """One message: ``701 BEGIN``, audio and marks, then exactly one of 702, 703, 704 —
    BEGIN always first, however soon the message is stopped."""

    link: TtsdLink
    out: Output
    options: Callable[[], dict[str, Any]]
    """The request options for the settings now (``SET`` may change them)."""
    text: str
    kind: str
    finished: bool = field(default=False, init=False)
    pause_requested: bool = field(default=False, init=False)
    rid: int | None = field(default=None, init=False)
    rate: int = field(default=22050, init=False)
    sent_audio: bool = field(default=False, init=False)
    begun: bool = field(default=False, init=False)
    task: asyncio.Task[None] | None = field(default=None, init=False)

    # -- writing: nothing gets out once the message has ended
    def begin(self) -> None:
        """``701 BEGIN``, once, before anything else of the message.  Sent when the message
        is taken, not when its task first runs: a STOP or the next SPEAK read before then
        ended the message without its BEGIN, and speech-dispatcher waits for BEGIN."""
        if not self.begun:
            self.begun = True
            self.out.line(wire.BEGIN)

    def emit(self, data: bytes) -> None:
        if not self.finished:
            self.out.write(data)

    def finish(self, event: str) -> bool:
        if self.finished:
            return False
        self.begin()
        self.out.line(event)
        self.finished = True
        return True

    def stop(self) -> None:
        """``STOP``: 703 now, then cancel the ttsd request (no wait for it)."""
        if self.finish(wire.STOP):
            self._cancel_request()

    def _cancel_request(self) -> None:
        if self.rid is not None and self.link.cancel_soon(self.rid):
            self.rid = None  # once is enough

    # -- the work
    async def run(self) -> None:
        self.begin()
        try:
            await self._speak()
        except TtsdError as exc:
            if exc.code in ("disconnected", "connect"):
                log.error("lost ttsd (%s); the message ends here, the next one reconnects", exc)
                await self.link.drop()
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
        link = self.link
        if self.kind == "text" and not self.text.lstrip().startswith("<"):
            # Not SSML (speech-dispatcher 0.11 always wraps in <speak>; other callers of
            # the module protocol may not): plain text, no markup, no entities.
            items: list[markup.Item] = [markup.Text(self.text)]
        elif self.kind == "text":
            if link.ssml_supported is not False and link.fits_one_request(self.text):
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
                        link.ssml_supported = False
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
            for piece in markup.split_long(item.text, link.max_text_chars):
                if self.finished:
                    return
                await self._request(piece, ssml=False)

    async def _request(self, text: str, ssml: bool) -> None:
        client = await self.link.ensure()
        opts = self.options()
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
            await self.out.drain()
            if self.finished:
                return
            self.emit(wire.AudioBlock(pcm[i : i + step], self.rate).encode())
            self.sent_audio = True

    async def _mark(self, name: str) -> None:
        await self.out.drain()
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
