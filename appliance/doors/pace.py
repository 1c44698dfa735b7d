"""Paced output: audio sent in frames of exactly N ms on the real-time clock.

A telephony bridge forwards frames as they arrive; audio sent as fast as it is made
would flood the far end.  A :class:`Pacer` sits in a door's send path (never in the
scheduler: the stream's deadlines stay those of a listener playing in real time).  The
door puts encoded bytes in as chunks come; one task per paced request sends them out
in frames:

- frame *k* holds the samples ``[floor(k·S), floor((k+1)·S))``, S = rate · N / 1000
  (exactly N ms each when S is whole, as at 8 kHz; otherwise within one sample, exact
  on average);
- the first :data:`START_BUFFER_MS` of audio (whole frames, at least one) leave as soon
  as they are made — the start buffer, which lets the far end's jitter buffer fill and
  the stream get ahead; frame *k* ≥ B after them leaves at ``t0 + (k − B + 1)·N``, ``t0`` the
  time the first frame left.  Each send waits for its absolute target on the loop's
  monotonic clock (``loop.call_at``), so errors never accumulate;
- a frame that was not made in time (the stream fell behind) leaves when it is made
  and the schedule restarts from it (counted in :attr:`Pacer.late`): a late frame is
  not followed by a burst;
- the last frame is padded with silence to full length;
- frame *k* is the span ``[k·N, (k+1)·N)`` ms of the request's audio (its ``offset_ms`` is
  exactly ``k·N``), and a word (``word_timings``) rides on the frame that holds its start:
  the first frame whose span contains its ``offset_ms``, or the last frame for a word that
  would start after the audio's end (none does: each word lies within its chunk).

Bounds: what is buffered ahead of the clock is capped at :data:`MAX_AHEAD_S` of audio
(``put`` waits, holding back the stream as a slow client would); one task per request,
cancelled by :meth:`Pacer.abort`.  ``pace_ms`` is within
:data:`appliance.speech.PACE_MS` (telephony uses 10–60 ms).

Lifecycle at shutdown: a door keeps its pacers in a :class:`PacedSends`.  The core's stream
is over once its audio is made, while its frames still leave on the clock, so the daemon's
drain waits for them (:meth:`PacedSends.drain`) up to its deadline, then cuts the rest
(:meth:`Pacer.cut`): their ``put`` and ``close`` raise ``shutting_down``, which the door
sends as the request's one terminal error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from appliance.errors import ErrorCode, ServiceError
from appliance.speech import Word

START_BUFFER_MS = 40
"""Audio sent at once before pacing starts (rounded up to whole frames).  A head start for
the far end's jitter buffer, taken from the slack of the stream: with 100 ms, a first
chunk of ~100 ms left the second chunk ~20 ms to arrive, and a loaded box missed it."""
MAX_AHEAD_S = 10.0
"""Audio a pacer holds ahead of the clock before ``put`` waits."""
CUT_GRACE_S = 1.0
"""After a drain's deadline, how long the owners of the pacers it cut get to send their
error (a client that does not read is not waited for beyond it)."""

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass
class PacedFrame(Generic[T]):
    """One frame and the pieces (chunks) it carries bytes of, in order."""

    index: int
    data: bytes
    offset_ms: float
    """Exactly ``index · pace_ms``: where the frame starts in the request's audio."""
    duration_ms: float
    """``pace_ms`` (the samples in it are within one of that; exact on average)."""
    pieces: list[T] = field(default_factory=list)
    """Pieces whose bytes are in this frame."""
    starts: list[T] = field(default_factory=list)
    """Pieces that begin in this frame."""
    ends: list[T] = field(default_factory=list)
    """Pieces that end in this frame."""
    words: list[Word] = field(default_factory=list)
    """Words whose start lies in this frame's span (each word on exactly one frame)."""


async def sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    """Wait until ``loop.time()`` reaches ``when`` (a monotonic target, not a duration)."""
    if when <= loop.time():
        return
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    handle = loop.call_at(when, wake)
    try:
        await fut
    finally:
        handle.cancel()


class Pacer(Generic[T]):
    """Frames of ``pace_ms`` out through ``send`` (see the module doc)."""

    def __init__(
        self,
        pace_ms: int,
        sample_rate: int,
        bytes_per_sample: int,
        silence: Callable[[int], bytes],
        send: Callable[[PacedFrame[T]], Awaitable[None]],
        group: PacedSends | None = None,
    ) -> None:
        self.pace_ms = pace_ms
        self.pace_s = pace_ms / 1000.0
        self.rate = sample_rate
        self.width = bytes_per_sample
        self._samples_per_frame = sample_rate * pace_ms / 1000.0
        self.buffer_frames = max(1, math.ceil(START_BUFFER_MS / pace_ms))
        self._silence = silence
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._buf = bytearray()
        self._base = 0  # byte offset (in the whole stream) of _buf[0]
        self._total = 0  # bytes put so far
        self._pieces: list[tuple[int, int, T]] = []  # (start, end) byte offsets, tag
        self._words: list[Word] = []  # not yet sent, in order of their start
        self._cut: ServiceError | None = None
        self._group = group
        self._closed = False
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._t0: float | None = None
        self.frames = 0
        self.late = 0
        """Frames that left after their time (the stream fell behind)."""
        self._task = asyncio.create_task(self._run())
        if group is not None:
            group.add(self)

    # -- the door's side

    async def put(self, data: bytes, tag: T, words: Iterable[Word] | None = None) -> None:
        """Queue ``data`` (whole samples) and the ``words`` that start in it for sending;
        waits while too much is ahead."""
        self._raise_failure()
        self._words.extend(words or ())
        if data:
            start = self._total
            self._total += len(data)
            self._buf += data
            self._pieces.append((start, self._total, tag))
            self._wake.set()
        if len(self._buf) > MAX_AHEAD_S * self.rate * self.width:
            self._room.clear()
            room = asyncio.ensure_future(self._room.wait())
            try:
                await asyncio.wait([room, self._task], return_when=asyncio.FIRST_COMPLETED)
            finally:
                room.cancel()
            self._raise_failure()

    async def close(self) -> None:
        """No more audio: send the rest (the last frame padded) and return when it left.
        Raises ``shutting_down`` when the drain cut it (:meth:`cut`)."""
        self._closed = True
        self._wake.set()
        await asyncio.wait([self._task])  # as shield: a cancelled caller leaves it running
        self._raise_failure()

    def abort(self) -> None:
        """Stop now (cancelled, client gone): what is queued is dropped."""
        self._closed = True
        self._task.cancel()

    def cut(self, exc: ServiceError) -> None:
        """The daemon's drain is over: stop now, and ``put`` / ``close`` raise ``exc``."""
        if self._cut is None:
            self._cut = exc
        self.abort()

    async def stop(self) -> None:
        """:meth:`abort`, and wait until the task has ended (the owner is done with it)."""
        self.abort()
        try:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        finally:
            if self._group is not None:
                self._group.discard(self)

    def _raise_failure(self) -> None:
        if self._cut is not None:
            raise self._cut
        if self._task.done() and not self._task.cancelled():
            exc = self._task.exception()
            if exc is not None:
                raise exc

    # -- the sending task

    def _frame_bytes(self, k: int) -> tuple[int, int]:
        """Byte offsets of frame ``k`` in the stream."""
        s = self._samples_per_frame
        return math.floor(k * s) * self.width, math.floor((k + 1) * s) * self.width

    async def _run(self) -> None:
        k = 0
        while True:
            start, end = self._frame_bytes(k)
            while self._total < end and not self._closed:
                self._wake.clear()
                await self._wake.wait()
            if self._total <= start:
                return  # everything sent (a stream that ends on a frame boundary)
            ready = self._loop.time()  # when its audio was there (production's lateness)
            frame = self._take(k, start, end)
            await self._wait_turn(k, ready)
            await self._send(frame)
            self.frames += 1
            k += 1

    async def _wait_turn(self, k: int, ready: float) -> None:
        loop = self._loop
        paced = k - self.buffer_frames + 1  # frames 0 … B-1 at once, frame B one period later
        if self._t0 is None:
            self._t0 = loop.time()
        if paced <= 0:
            return
        target = self._t0 + paced * self.pace_s
        if ready > target + self.pace_s:
            # The stream fell behind by more than a frame: restart the schedule here, no
            # burst.  (A loop that merely woke late keeps the schedule: the next frame is
            # on time again.)
            self.late += 1
            self._t0 = loop.time() - paced * self.pace_s
            return
        await sleep_until(loop, target)

    def _take(self, k: int, start: int, end: int) -> PacedFrame[T]:
        have = min(end, self._total)
        data = bytes(self._buf[: have - start])
        del self._buf[: have - start]
        self._base = have
        if have < end:
            data += self._silence((end - have) // self.width)
        if len(self._buf) <= MAX_AHEAD_S * self.rate * self.width:
            self._room.set()
        frame: PacedFrame[T] = PacedFrame(k, data, k * self.pace_ms, self.pace_ms)
        last = self._closed and self._total <= end
        due = len(self._words)
        if not last:  # the words that start before this frame's end
            due = next(
                (i for i, w in enumerate(self._words) if w.offset_ms >= (k + 1) * self.pace_ms),
                due,
            )
        frame.words, self._words = self._words[:due], self._words[due:]
        keep: list[tuple[int, int, T]] = []
        for p_start, p_end, tag in self._pieces:
            if p_start < end and p_end > start:
                frame.pieces.append(tag)
                if p_start >= start:
                    frame.starts.append(tag)
                if p_end <= end:
                    frame.ends.append(tag)
            if p_end > end:
                keep.append((p_start, p_end, tag))
        self._pieces = keep
        return frame


class PacedSends:
    """The pacers of one door that are still sending: what the daemon's drain waits for,
    and what it cuts at its deadline.  A pacer is in it from its start until its owner's
    :meth:`Pacer.stop` (after the owner has sent the request's terminal event)."""

    def __init__(self) -> None:
        self._live: set[Pacer[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._live)

    def add(self, pacer: Pacer[Any]) -> None:
        self._live.add(pacer)
        self._idle.clear()

    def discard(self, pacer: Pacer[Any]) -> None:
        self._live.discard(pacer)
        if not self._live:
            self._idle.set()

    async def drain(self, deadline: float, grace_s: float = CUT_GRACE_S) -> int:
        """Until no pacer sends, or until ``deadline`` (the loop's clock); then each one
        still sending is cut with ``shutting_down`` and its owner gets ``grace_s`` to say
        so.  Returns how many were cut."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await self._idle.wait()
        cut = list(self._live)
        if cut:
            log.warning("shutdown: %d paced streams still sending: ended", len(cut))
        for pacer in cut:
            pacer.cut(ServiceError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down"))
        if cut:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self._idle.wait()
        return len(cut)
