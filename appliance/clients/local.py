"""ttsd in this process, for one command: ``ttsctl --local`` with no daemon running.

:class:`LocalDaemon` builds what ``ttsd serve`` builds from the same config —
``Runtime.load`` (voices, their cached cuts, the scheduler's workers), the user lexicon and
the service core — and serves protocol v1 through the daemon's own connection handler on
one end of a socketpair; the caller's :class:`~appliance.clients.client.Client` gets the
other end.  Every request so goes through the same parser, checks, core and encoders as on
the daemon's socket, and no socket file is made.

Lifecycle: ``with LocalDaemon(cfg) as sock:`` loads the voices in a thread of its own (a
voice's first use cuts it: minutes; later ones read the cut from ``voices.cache_dir``) and
returns once requests can be served, or raises :class:`LocalError` with the one-line reason;
leaving closes the connection, lets what is in flight end (up to
``limits.shutdown_timeout_s``) and closes the core and the voices.  No speaker: ``speak``
gets ``no_audio_device``.  No warm-up (one command does not pay for it), and the
scheduler's workers are those ``engine.workers`` says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import socket
import threading
from pathlib import Path
from types import TracebackType

from appliance.core.runtime import Runtime, StartError
from appliance.core.service import Service
from appliance.doors.v1.server import V1Door
from appliance.ops.config import Config
from appliance.ops.logsetup import one_line
from appliance.text.lexicon import LexiconError, load_checked

STOP_WAIT_S = 30.0
"""How long leaving waits for the thread (what is in flight, then closing the voices)."""


class LocalError(Exception):
    """The in-process daemon cannot start (no default voice, a bad lexicon): one line."""


class LocalDaemon:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._ready = threading.Event()
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="ttsd-local", daemon=True)

    def __enter__(self) -> socket.socket:
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._close_sockets()
            self._thread.join(STOP_WAIT_S)
            raise LocalError(self._failure)
        return self._ours

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        # The client's end closes: the connection handler sees the end of its input.
        self._ours.close()
        self._thread.join(STOP_WAIT_S)

    def _close_sockets(self) -> None:
        self._ours.close()
        self._theirs.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception as exc:  # the thread's boundary: said in one line, not lost
            self._failure = self._failure or f"cannot start: {one_line(exc)}"
        finally:
            self._theirs.close()  # a client still waiting sees the end, not a hang
            self._ready.set()  # never leave __enter__ waiting, whatever happened

    async def _serve(self) -> None:
        runtime = await self._load()
        if runtime is None:
            return
        service = Service(runtime)
        try:
            # The door's socket path is never bound: the connection is the socketpair's.
            door = V1Door(service, Path(os.devnull))
            reader, writer = await asyncio.open_unix_connection(sock=self._theirs)
            self._ready.set()
            await door.serve_stream(reader, writer)
            await service.shutdown(self.cfg.limits.shutdown_timeout_s)
        finally:
            service.close()
            runtime.close()

    async def _load(self) -> Runtime | None:
        """The voices (off this loop) and the lexicon, as the daemon loads them; None
        with :attr:`_failure` set when they cannot be."""
        loop = asyncio.get_running_loop()
        try:
            runtime = await loop.run_in_executor(
                None, functools.partial(Runtime.load, self.cfg, warm=False)
            )
        except StartError as exc:
            self._failure = f"cannot start: {exc}"
            return None
        try:
            if self.cfg.voices.lexicon:
                infos = [v.phonemizer.info for v in runtime.voices.values()]
                read = functools.partial(load_checked, self.cfg.voices.lexicon, infos)
                lexicon = await loop.run_in_executor(None, read)
                runtime = dataclasses.replace(runtime, lexicon=lexicon)  # it is frozen
        except LexiconError as exc:
            runtime.close()
            self._failure = f"lexicon: {exc}"
            return None
        runtime.scheduler.start()
        return runtime
