"""SIGHUP for a serving daemon: the config file and the lexicon read again, the live keys
applied, ``voices_dir`` scanned for voices added or removed.

- The config is read as at start (the file, the command line's flags over it), so a key
  the flags set never shows as changed; a key that is not live is logged as needing a
  restart, once per reload.
- The lexicon is read again even when its path did not change (that is the point of a
  reload); requests in flight keep the one they started with.
- Voices: :mod:`appliance.core.voiceset` scans in a worker and swaps the changes in.

Each step that changes something builds a new :class:`~appliance.core.runtime.Runtime`
(it is frozen) and swaps it into the service whole: the :class:`Reloader` is the one
owner of that swap (``Service.swap_runtime``).

Bounds: one reload at a time (:class:`Reloads`: a SIGHUP during one asks for exactly one
more after it); each file read in a thread of its own with a deadline
(:data:`CONFIG_READ_TIMEOUT_S`, ``voices.lexicon_timeout_s``), so a hung file neither
stalls the loop nor keeps SIGTERM waiting.  Lifecycle: once it serves, the daemon makes a
:class:`Reloader` on its service for each reload.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from appliance.ops.config import Config, ConfigError, Flags, flatten, live_keys, load_config
from appliance.ops.logsetup import set_level
from appliance.ops.offloop import FileReads
from appliance.text.lexicon import Lexicon, LexiconError, load_checked

if TYPE_CHECKING:
    from appliance.core.runtime import Runtime
    from appliance.core.service import Service

log = logging.getLogger("ttsd")

CONFIG_READ_TIMEOUT_S = 30.0
"""A reload's read of the config file past this is given up (a hung file system)."""


class Reloader:
    """What one reload does to the runtime ``service`` serves from (see the module)."""

    def __init__(
        self, service: Service, config_path: str | None, flags: Flags, file_reads: FileReads
    ) -> None:
        self.service = service
        self.config_path = config_path
        self.flags = flags
        self.file_reads = file_reads

    async def reload(self) -> None:
        try:
            new = await self.file_reads.run(
                functools.partial(load_config, self.config_path, self.flags),
                str(self.config_path),
                CONFIG_READ_TIMEOUT_S,
                ConfigError,
            )
        except ConfigError as exc:
            log.error("reload refused: %s", exc)
            return
        self._apply_config(new)
        await self._reload_lexicon()
        await self._reload_voices()

    @property
    def runtime(self) -> Runtime:
        """The runtime served from now (each step below swaps in a new one)."""
        return self.service.runtime

    async def _reload_voices(self) -> None:
        from appliance.core import voiceset

        loop = asyncio.get_running_loop()
        changes = await loop.run_in_executor(None, voiceset.scan, self.runtime)
        self.service.swap_runtime(voiceset.apply(self.runtime, changes))

    def _apply_config(self, new: Config) -> None:
        old = self.runtime.config
        old_flat, new_flat = flatten(old), flatten(new)
        changed = [k for k in new_flat if new_flat[k] != old_flat.get(k)]
        live_ones = live_keys()
        for k in changed:
            if k not in live_ones:
                log.warning("config %s changed: needs a restart to take effect", k)
        live = {k for k in changed if k in live_ones}
        if not live:
            log.info("reload: nothing to change live")
            return
        merged = merge_live(old, new, live)
        self.service.swap_runtime(dataclasses.replace(self.runtime, config=merged))
        set_level(merged.logging.level)
        log.info("reloaded: %s", ", ".join(sorted(live)))

    async def _reload_lexicon(self) -> None:
        try:
            new = await read_lexicon(self.file_reads, self.runtime, self.runtime.config)
        except LexiconError as exc:
            log.error("lexicon reload refused, keeping the old one: %s", exc)
            return
        self.service.swap_runtime(dataclasses.replace(self.runtime, lexicon=new))
        log.info("lexicon: %s", f"{len(new)} entries from {new.source}" if new else "none")


async def read_lexicon(file_reads: FileReads, runtime: Runtime, cfg: Config) -> Lexicon | None:
    """``cfg``'s lexicon checked against the runtime's voices (None when there is none)."""
    if not cfg.voices.lexicon:
        return None
    infos = [v.phonemizer.info for v in runtime.voices.values()]
    return await file_reads.run(
        functools.partial(load_checked, cfg.voices.lexicon, infos),
        cfg.voices.lexicon,
        cfg.voices.lexicon_timeout_s,
        LexiconError,
    )


def merge_live(old: Config, new: Config, live: set[str]) -> Config:
    """``old`` with the ``live`` keys (``section.key``) taken from ``new``."""
    sections = {}
    for f in dataclasses.fields(old):
        sec_old, sec_new = getattr(old, f.name), getattr(new, f.name)
        changes = {
            k.split(".", 1)[1]: getattr(sec_new, k.split(".", 1)[1])
            for k in live
            if k.startswith(f.name + ".")
        }
        sections[f.name] = dataclasses.replace(sec_old, **changes) if changes else sec_old
    return dataclasses.replace(old, **sections)


class Reloads:
    """At most one reload running; requests during it fold into one more run after it."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.again = False

    def request(self, reload_once: Callable[[], Awaitable[None]]) -> asyncio.Task[None] | None:
        """The task started for this request; None when it joined the running one."""
        if self.task is not None:
            self.again = True
            return None
        self.task = asyncio.get_running_loop().create_task(self._run(reload_once))
        return self.task

    async def _run(self, reload_once: Callable[[], Awaitable[None]]) -> None:
        try:
            while True:
                self.again = False
                await reload_once()
                if not self.again:
                    return
        finally:
            self.task = None
