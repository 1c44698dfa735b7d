"""One spoken request: its samples on their way to the device, and its events.

Three threads touch an utterance:

* the producer (the server's synthesis stream, usually the asyncio loop) calls
  :meth:`Utterance.push` / :meth:`Utterance.finish`; samples are resampled to the device
  rate here, scaled by the volume and appended to a deque (append/popleft are atomic in
  CPython, so the hand-over needs no lock);
* the PortAudio callback reads them with :meth:`Utterance._read_into` and marks the start;
* the player's supervisor thread delivers events (``started``, ``ended``) to waiters:
  a :class:`threading.Event` for plain threads, and futures on the event loop that was
  running at submit time, resolved with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from appliance.playback.queue import Priority

F32 = npt.NDArray[np.float32]

_ids = itertools.count(1)

# Why an utterance ended.  ``cancelled`` = the client asked (stop/cancel) or the player
# closed; ``interrupted`` = another request or the device took it away.
END_REASONS = ("done", "cancelled", "interrupted", "dropped", "device_lost", "closed")
_CANCELLED = frozenset({"cancelled", "closed"})
_INTERRUPTED = frozenset({"interrupted", "dropped", "device_lost"})


@dataclass(frozen=True)
class EndInfo:
    reason: str
    """One of :data:`END_REASONS`."""
    cancelled: bool
    interrupted: bool
    stats: dict[str, Any] = field(default_factory=dict)
    """``underruns``, ``played_ms``, ``latency_ms`` (None if it never started), ``queued_ms``."""


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


class Utterance:
    """Created by :meth:`Player.submit`; the producer pushes float32 mono samples into it."""

    def __init__(
        self,
        priority: Priority,
        volume: float,
        in_rate: int,
        out_rate: int,
        client_key: Hashable,
        on_cancel: Callable[[Utterance], None],
    ) -> None:
        import soxr  # deferred: only a player with a device makes utterances

        self.id = next(_ids)
        self.priority = priority
        self.volume = float(volume)
        self.in_rate = int(in_rate)
        self.out_rate = int(out_rate)
        self.client_key = client_key
        self.created = time.monotonic()
        self.position = -1
        self._on_cancel = on_cancel
        # soxr's stream keeps filter state between chunks, so chunk borders are seamless.
        self._resampler: Any = (
            soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="float32")
            if self.in_rate != self.out_rate
            else None
        )
        self._chunks: deque[F32] = deque()
        self._input_done = False
        self._pushed_frames = 0
        # Callback-owned state (written only by the audio thread while it plays this one).
        self._offset = 0
        self._started = False
        self._starving = False
        self.started_at: float | None = None
        self.frames_played = 0
        self.underruns = 0
        self.latency_ms: float | None = None
        # Set under the player's lock when the player wants it faded out.
        self._cut_reason: str | None = None
        # Event delivery.
        self._evlock = threading.Lock()
        self._started_evt = threading.Event()
        self._ended_evt = threading.Event()
        self._end: EndInfo | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started_fut: asyncio.Future[float | None] | None = None
        self._ended_fut: asyncio.Future[EndInfo] | None = None
        try:
            self._bind(asyncio.get_running_loop())
        except RuntimeError:
            pass  # no loop in this thread; the first wait_*() binds one

    # --- producer side ----------------------------------------------------------------------

    def push(self, samples: npt.ArrayLike) -> bool:
        """Queue float32 mono samples at the voice rate.  False once the utterance ended."""
        if self._ended_evt.is_set() or self._input_done:
            return False
        x = np.array(samples, dtype=np.float32, copy=True).reshape(-1)
        if self._resampler is not None:
            x = np.asarray(self._resampler.resample_chunk(x, last=False), dtype=np.float32)
        self._append(x)
        return True

    def finish(self) -> None:
        """No more samples: the utterance ends once the device has played what was pushed."""
        if self._input_done:
            return
        if self._resampler is not None and not self._ended_evt.is_set():
            tail = self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
            self._append(np.asarray(tail, dtype=np.float32))
        self._input_done = True

    def _append(self, x: F32) -> None:
        if x.size == 0:
            return
        if self.volume != 1.0:
            x *= self.volume
            np.clip(x, -1.0, 1.0, out=x)
        self._pushed_frames += x.size
        self._chunks.append(x)

    def cancel(self) -> None:
        """Stop this utterance: faded out within one callback if speaking, else dropped."""
        self._on_cancel(self)

    # --- audio thread side ------------------------------------------------------------------

    def _read_into(self, dst: F32) -> int:
        """Copy up to ``len(dst)`` samples into ``dst``; no allocation, no lock."""
        need = dst.shape[0]
        n = 0
        chunks = self._chunks
        off = self._offset
        while n < need and chunks:
            head = chunks[0]
            take = min(need - n, head.shape[0] - off)
            dst[n : n + take] = head[off : off + take]
            n += take
            off += take
            if off >= head.shape[0]:
                chunks.popleft()
                off = 0
        self._offset = off
        self.frames_played += n
        return n

    # --- events -----------------------------------------------------------------------------

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._evlock:
            if self._loop is not None:
                return
            self._loop = loop
            self._started_fut = loop.create_future()
            self._ended_fut = loop.create_future()
            if self._started_evt.is_set():
                self._started_fut.set_result(self.latency_ms)
            if self._end is not None:
                self._ended_fut.set_result(self._end)

    def _post(self, fut: asyncio.Future[Any] | None, value: Any) -> None:
        loop = self._loop
        if fut is None or loop is None:
            return
        try:
            loop.call_soon_threadsafe(_set_result, fut, value)
        except RuntimeError:
            pass  # the waiting loop is closed; nobody is listening any more

    def _resolve_started(self) -> None:
        with self._evlock:
            if self._started_evt.is_set():
                return
            self._started_evt.set()
            fut = self._started_fut
        self._post(fut, self.latency_ms)

    def _resolve_end(self, reason: str) -> EndInfo:
        with self._evlock:
            if self._end is not None:
                return self._end
            played_ms = 1000.0 * self.frames_played / self.out_rate
            queued_ms = None
            if self.started_at is not None:
                queued_ms = 1000.0 * (self.started_at - self.created)
            self._end = EndInfo(
                reason=reason,
                cancelled=reason in _CANCELLED,
                interrupted=reason in _INTERRUPTED,
                stats={
                    "underruns": self.underruns,
                    "played_ms": round(played_ms, 1),
                    "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1),
                    "queued_ms": None if queued_ms is None else round(queued_ms, 1),
                },
            )
            self._ended_evt.set()
            self._chunks.clear()
            end = self._end
            started_fut, ended_fut = self._started_fut, self._ended_fut
            started_unset = not self._started_evt.is_set()
            self._started_evt.set()  # wake started-waiters too: it will never start now
        if started_unset:
            self._post(started_fut, None)
        self._post(ended_fut, end)
        return end

    @property
    def end_info(self) -> EndInfo | None:
        return self._end

    async def wait_queued(self) -> int:
        """The position it got at submit (0 = next); -1 when it was dropped on arrival."""
        return self.position

    async def wait_started(self) -> float | None:
        """Latency in ms (request → first sample to PortAudio + device latency), None if it
        ended without starting."""
        self._bind(asyncio.get_running_loop())
        assert self._started_fut is not None
        return await asyncio.shield(self._started_fut)

    async def wait_ended(self) -> EndInfo:
        self._bind(asyncio.get_running_loop())
        assert self._ended_fut is not None
        return await asyncio.shield(self._ended_fut)

    def wait_started_sync(self, timeout: float | None = None) -> bool:
        """For plain threads (tests, the benchmark)."""
        return self._started_evt.wait(timeout)

    def wait_ended_sync(self, timeout: float | None = None) -> EndInfo | None:
        self._ended_evt.wait(timeout)
        return self._end

    def __repr__(self) -> str:
        return f"<Utterance {self.id} {self.priority.value} client={self.client_key!r}>"
