"""One utterance on the device, fed by a stream of chunks: what ``speak`` does with audio.

:class:`Speech` is the consumer a ``speak`` request's stream writes into: each chunk is
pushed into the player's :class:`~appliance.playback.utterance.Utterance`; ``started``
is reported when the device is handed the first sample, and each SSML mark when it is
handed the mark's sample (polled every 5 ms from the event loop: the audio thread must
not call into the loop on every callback).  It knows nothing of the core: the producer
(the stream's job) is handed in.

Bounds: marks wait in a deque as long as the request's own (capped) text has marks; the
tasks it starts end with the utterance.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable

from appliance.playback.utterance import EndInfo, Utterance
from appliance.speech import Chunk, Mark

MARK_POLL_S = 0.005
"""How often the device's progress is looked at for a mark (well under a word)."""

Emit = Callable[[Chunk], Awaitable[None]]


class Speech:
    """A ``speak`` request's audio on its way to the device (see the module)."""

    def __init__(
        self,
        utterance: Utterance,
        on_started: Callable[[float], None],
        on_mark: Callable[[str], None] | None,
        waited_ms: float,
    ) -> None:
        """``waited_ms``: how long the request waited before its utterance was made (the
        player counts its latency from there; ``started`` reports it from the request)."""
        self.utterance = utterance
        self._on_started = on_started
        self._on_mark = on_mark
        self._waited_ms = waited_ms
        self._marks: collections.deque[Mark] = collections.deque()
        self._marks_changed = asyncio.Event()

    async def emit(self, chunk: Chunk) -> None:
        """The stream's emit: the chunk to the device, its marks to be reported."""
        if not self.utterance.push(chunk.samples):
            # Cut, dropped or stopped: no one will hear the rest, so stop making it.
            raise asyncio.CancelledError()
        if chunk.marks and self._on_mark is not None:
            self._marks.extend(chunk.marks)
            self._marks_changed.set()

    async def play(self, produce: Callable[[Emit], Awaitable[None]]) -> EndInfo:
        """Run ``produce(self.emit)``, then wait for the device to end the utterance; what
        happened to it (played out, cut, dropped, device lost)."""
        utt = self.utterance
        started = asyncio.create_task(self._relay_started())
        marks = asyncio.create_task(self._relay_marks(started)) if self._on_mark else None
        try:
            try:
                await produce(self.emit)
            finally:
                utt.finish()
            info = await utt.wait_ended()
            if marks is not None:
                # Marks on the last samples: the device has them now.
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(marks), timeout=0.2)
            # Let 'started' go out first when it happened.
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(started), timeout=0.5)
            return info
        finally:
            started.cancel()
            if marks is not None:
                marks.cancel()

    async def _relay_started(self) -> None:
        latency = await self.utterance.wait_started()
        if latency is not None:
            self._on_started(latency + self._waited_ms)

    async def _relay_marks(self, started: asyncio.Task[None]) -> None:
        assert self._on_mark is not None
        utt = self.utterance
        await asyncio.shield(started)  # 'started' goes out first
        if utt.latency_ms is None and utt.end_info is not None:
            return  # never started: nothing was heard
        while True:
            while not self._marks:
                self._marks_changed.clear()
                await self._marks_changed.wait()
            mark = self._marks[0]
            # (2 ms early: the resampler may hand over a few frames fewer at the end)
            target = max(0.0, mark.offset_ms - 2.0) * utt.out_rate / 1000.0
            while utt.frames_played < target:
                if utt.end_info is not None:
                    return  # ended before that sample was played: not heard
                await asyncio.sleep(MARK_POLL_S)
            self._marks.popleft()
            self._on_mark(mark.name)
