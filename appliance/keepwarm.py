"""A voice kept warm after its requests (``engine.keep_warm_s``: 30 s by default, 0 off).

Where the CPU slows when it idles (this 2-vCPU VM's host: a pure arithmetic loop ran
2.7x slower after a second of quiet than back to back, and the model's caches go cold
too), the short command's first packet after 3 s of quiet came at 149 ms instead of 39
(docs/speed.md, "Kept warm").  For ``keep_warm_s`` after each request, the voice it used
is run on one word (:func:`~appliance.core.warmup.keep_warm_touch`)
:data:`KEEP_WARM_FIRST_S` after the request ends, then every :data:`KEEP_WARM_EVERY_S`,
each time only if the model ran nothing else since the last look, and while the scheduler
has nothing queued or running (a stream waiting on a language model's next words is kept
warm too; one whose windows keep coming needs no touch): a conversation's next turn found
it at 34 ms (49 not kept), for 2–6 % of one core while it lasts; a box left alone stops
paying after ``keep_warm_s``.  On by default since stop 68: a voice assistant speaks
after a pause, and that first packet is the one its users feel.

Bounds: one task, at most one touch queued or running at a time, as batch work on the
scheduler (a request goes first: it never waits for a touch it did not find running, and
a running one takes 17 ms warm, ~45 cold, on one worker); the voices remembered are those
loaded, each forgotten ``keep_warm_s`` after its last request, or when a reload drops it.
Lifecycle: made with the daemon; :meth:`KeepWarm.on_request_done` starts its task when
there is something to keep warm; the task is the daemon's, cancelled at stop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appliance.core.service import Service, Stream
    from appliance.core.streaming import VoiceRuntime

log = logging.getLogger("ttsd")

KEEP_WARM_EVERY_S = 1.0
"""How often a kept voice runs.  The real daemon, the short command after 3 s of quiet,
two rounds of each period alternated (docs/speed.md, stop 67): first packet P50 45–48 ms
not kept; every 0.2 s 33–35 ms for 7–11 % of a core; every 1 s 34 ms for 2–3 %; every
2 s 37 ms for 1 %."""

KEEP_WARM_FIRST_S = 0.5
"""How long after a request ends its voice is first touched (then every
:data:`KEEP_WARM_EVERY_S`): a turn that comes a second after the last finds the model run
half a second before, not a touch just starting.  The real daemon, one at a time, two
rounds (docs/speed.md, stop 68): the short command after 1 s of quiet 48.5 ms with the
first touch at 0.5 s, 57.0 at 1 s, 55.3 not kept; after 3 s 51.3, 61.2, 87.0."""


class KeepWarm:
    """Runs the voices of recent requests while the daemon is quiet (see the module)."""

    def __init__(
        self,
        service: Callable[[], Service],
        keep: Callable[[asyncio.Task[Any]], None],
        every_s: float = KEEP_WARM_EVERY_S,
        first_s: float = KEEP_WARM_FIRST_S,
    ) -> None:
        self._service = service
        self._keep = keep
        self.every_s = every_s
        self.first_s = first_s
        self.until: dict[str, float] = {}
        """Voice name → when it stops being kept warm (monotonic seconds)."""
        self._task: asyncio.Task[None] | None = None
        self._ended = 0.0
        """When the last request ended (monotonic seconds): the touches' phase."""
        self._seen = 0
        """The scheduler's count of finished runs at the last look, or when the last
        request ended (its runs are in)."""

    def on_request_done(self, stream: Stream) -> None:
        """(The loop.) A request ended: keep its voice warm ``keep_warm_s`` from now."""
        service = self._service()
        keep_s = service.runtime.config.engine.keep_warm_s
        if keep_s <= 0 or service.stopping:  # nothing comes after a stop's last requests
            return
        self._ended = time.monotonic()
        self._seen = service.runtime.scheduler.completed
        self.until[stream.voice_name] = self._ended + keep_s
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
            self._keep(self._task)

    def _to_next_look(self) -> float:
        """Seconds to the next look: :attr:`first_s` after the last request ended, then
        every :attr:`every_s`."""
        since = time.monotonic() - self._ended - self.first_s
        return -since if since < 0 else self.every_s - since % self.every_s

    async def _loop(self) -> None:
        while self.until:
            await asyncio.sleep(self._to_next_look())
            now = time.monotonic()
            self.until = {name: t for name, t in self.until.items() if t > now}
            service = self._service()
            if service.stopping:
                return
            if now - self._ended < self.first_s - 0.01:
                continue  # a request ended while this look was due: the next keeps its phase
            if not service.runtime.warm_up_done:
                continue  # its steps measure the CPU they take: a touch beside would count
            scheduler = service.runtime.scheduler
            self._seen, last = scheduler.completed, self._seen
            if self._seen != last:
                continue  # the model ran in the last period (a stream's windows): warm
            for name in list(self.until):
                if scheduler.depth():
                    break  # other work runs the model, or is about to
                voice = service.runtime.voices.get(name)
                if voice is None:  # a reload dropped it
                    del self.until[name]
                    continue
                await self._touch(service, voice)
            self._seen = scheduler.completed  # our own touches count as quiet

    async def _touch(self, service: Service, voice: VoiceRuntime) -> None:
        # Here, not at the top: the daemon imports the core in its loading thread.
        from appliance.core.warmup import keep_warm_touch

        scheduler = service.runtime.scheduler
        fut = scheduler.submit(
            functools.partial(keep_warm_touch, voice, service.runtime.meter),
            deadline=time.monotonic() + 60.0,
            realtime=False,
            owner=self,
            kind="keep-warm",
        )
        try:
            await fut
        except asyncio.CancelledError:
            scheduler.cancel_owner(self)  # stopping: nothing of ours left queued
            raise
        except Exception as exc:  # the voice's requests fail the same way and say so
            log.debug("keeping %s warm failed: %s", voice.name, exc)
