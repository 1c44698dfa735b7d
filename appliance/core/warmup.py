"""A voice's warm-up: the shapes a stream takes, run once so that no client pays for a
session's first runs (ONNX Runtime grows its arenas on a session's first runs at a size:
a first request after start was ~15 ms slower than the tenth), measuring on the way what
admission and a quick start plan with.

- :func:`warm_first_packet`: what a request's first packet runs (the daemon runs it on
  every worker at once before it takes requests; issue 42).
- :class:`ClauseWarmUp`: one clause, first or later, as a sequence of steps of one or a
  few model runs each.  Run straight through in-process (``Runtime.warm_clause``), or
- :class:`IdleWarmUp`: by the daemon, each voice's later clause step by step as batch
  work on the scheduler while no request is in flight: the workers' heartbeat is renewed
  between steps (a later clause whole was one 20 s item on a busy box, and health said
  ``failing``), and a step under way when a request arrives is stopped and run again once
  none is in flight (beside a stream, its model runs took the cores the stream's windows
  needed: a busy box's early streams fell behind).

Lifecycle: a ClauseWarmUp or an IdleWarmUp lives for one warm-up; it mutates the voices'
``costs``.  How far the warm-up has got is :class:`WarmState` (the runtime's ``warm``),
written by the warm-up alone: ``Runtime.warm_first_packets``, then ``Runtime.finish_start``
or the daemon once IdleWarmUp has run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance.core.admission import process_cpu_s
from appliance.core.chunkplan import mode_plan
from appliance.core.pipeline.types import VoiceCosts
from appliance.core.streaming import VoiceRuntime
from appliance.model.engine.base import Encoded
from appliance.model.engine.windows import MAX_WINDOW_FRAMES, decode_span
from appliance.model.voices.costs import StoredCosts, read_costs, write_costs
from appliance.ops.meter import KEEP_WARM, RunMeter
from appliance.speech import IntArray
from appliance.voicetypes import Voice

if TYPE_CHECKING:
    from appliance.core.scheduler import Scheduler

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.05
"""How often :class:`IdleWarmUp` looks whether a request has come or the last has ended."""

WARM_UP_FIRST = "Ready when you are, just say the word and we begin."
WARM_UP_LATER = (
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building, which would replace the old one in the town square."
)


@dataclass
class WarmState:
    """How far the warm-up has got, the one part of a runtime that changes in place (the
    runtime is otherwise frozen): written only by the warm-up, read by ``health``, ``info``
    and admission.  Every runtime a reload makes from the first shares this one."""

    first_packets: bool = False
    """A first packet now allocates nothing new (``Runtime.warm_first_packets`` ran)."""
    done: bool = False
    """The later clauses are warm too (the daemon runs them in the background)."""
    stream_cost: float | None = None
    """CPU seconds per second of audio a stream's later clauses took at start-up (the
    costliest voice): admission's estimate until real streams have been measured."""

    def first_packets_warm(self, cost: float | None) -> None:
        self.stream_cost, self.first_packets = cost, True

    def finished(self, cost: float | None) -> None:
        """The rest of the warm-up ran; ``cost`` (None: not measured) replaces the first
        packets' estimate."""
        if cost is not None:
            self.stream_cost = cost
        self.done = True


def costliest(a: float | None, b: float | None) -> float | None:
    """The larger of two voices' costs; None stands for "not measured"."""
    return b if a is None else a if b is None else max(a, b)


def known_costs(voice: Voice, backend: str) -> VoiceCosts:
    """A voice's costs as the last start on this machine measured them, else the
    defaults (``stream_cost`` None: this start measures before it serves)."""
    stored = read_costs(voice, backend)
    if stored is None:
        return VoiceCosts()
    return VoiceCosts(
        prior_s_per_id=stored.prior_s_per_id,
        first_decode_s=stored.first_decode_s,
        stream_cost=stored.stream_cost,
    )


def keep_cost(v: VoiceRuntime, cost: float | None) -> None:
    """A clean measure of ``v``'s later clause (nothing else ran beside it): the voice's
    stream cost now, and kept for the next start (file I/O: a worker's)."""
    if cost is None or cost <= 0:
        return
    c = v.costs
    c.stream_cost = cost
    kept = StoredCosts(
        stream_cost=cost, first_decode_s=c.first_decode_s, prior_s_per_id=c.prior_s_per_id
    )
    write_costs(v.source, v.model.backend_name, kept)


def warm_first_packet(v: VoiceRuntime, ids: IntArray) -> None:
    """One first packet's runs: the prior (what a first clause's encode is), the flow over
    the widest first chunk, and that chunk through the decoder a lone request uses and the
    one a burst uses (:func:`appliance.model.engine.windows.decode_span`'s ``urgent``)."""
    if not v.can_stream:
        v.model.fused(ids, v.defaults, v.default_speaker)
        return
    enc = v.model.encode_prior(ids, v.defaults, v.default_speaker)
    # The widest first chunk a plan makes (``reading``'s): warmed at that width, a first
    # chunk of any narrower one allocates nothing more.
    widest = mode_plan("reading", 1000.0 * v.hop / v.sample_rate).first_max
    width = min(enc.frames, widest)
    for urgent in (True, False):
        enc.ahead = None
        decode_span(v.model, enc, 0, width, v.context, v.hop, urgent)


KEEP_WARM_TEXT = "Hi."
"""What :func:`keep_warm_touch` runs: the fewest ids a voice phonemizes to a clause."""


def keep_warm_touch(v: VoiceRuntime, meter: RunMeter) -> None:
    """(A worker.) The fewest runs that go through every part of ``v``'s model: the prior
    on a word, the flow and the decoder over one frame and no context; its audio is thrown
    away.  Run often enough (``engine.keep_warm_s``, :mod:`appliance.keepwarm`), it keeps
    the CPU and the voice's weights from going cold between a conversation's turns.  Its
    runs count in ``meter`` as :data:`~appliance.ops.meter.KEEP_WARM`, not as a request's."""
    ids = v.phonemizer.ids(KEEP_WARM_TEXT)
    with meter.counted_as(KEEP_WARM):
        if not v.can_stream:
            v.model.fused(ids, v.defaults, v.default_speaker)
            return
        enc = v.model.encode_prior(ids, v.defaults, v.default_speaker)
        decode_span(v.model, enc, 0, 1, 0, v.hop, ahead=False)


@dataclass
class ClauseWarmUp:
    """One clause of ``voice`` through the shapes a stream takes (see the module).

    A first clause as long as any: the prior, the windowed flow, first chunks (the decoder
    a listener waits for; ``costs.first_decode_s``) and the windows decoded ahead up to the
    largest.  A later clause: the whole encoder, the same windows, the clause whole as a
    ``sentence``-mode chunk is (decoder runs of the longest kind), then a whole sentence's
    prior alone (``costs.prior_s_per_id``, what a quick start plans with).

    :meth:`step` runs the next step; each leaves the state as it found it if a run in it
    is stopped, so it can be run again.  :meth:`cost` is the clause's CPU seconds per
    second of audio for its encoder and windows, as a stream pays them (this process's CPU
    time: it means something only when nothing else ran meanwhile).
    """

    voice: VoiceRuntime
    first: bool
    ids: IntArray = field(init=False)
    enc: Encoded | None = None
    cpu_s: float = 0.0
    done: bool = False
    _ahead_at: int = 8
    _whole_at: int = 0
    _phase: str = "encode"
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.ids = self.voice.phonemizer.ids(WARM_UP_FIRST if self.first else WARM_UP_LATER)

    def run(self) -> float | None:
        """Every step, straight through; the cost."""
        while not self.done:
            self.step()
        return self.cost()

    def step(self) -> bool:
        """The next step; True once the clause is done."""
        v = self.voice
        if not v.can_stream:
            v.model.fused(self.ids, v.defaults, v.default_speaker)
            return self._finish()
        steps: dict[str, Callable[[], None]] = {
            "encode": self._encode,
            "first": self._first_chunks,
            "ahead": self._ahead,
            "whole": self._whole,
            "prior": self._prior,
        }
        steps[self._phase]()
        return self.done

    def cost(self) -> float | None:
        if self.enc is None or not self.done:
            return None
        audio_s = self.enc.frames * self.voice.hop / self.voice.sample_rate
        return self.cpu_s / audio_s if audio_s > 0 else None

    def _encode(self) -> None:
        v = self.voice
        cpu0 = process_cpu_s()
        # encode_prior + decode_span run the prior and the windowed flow, if any.
        encode = v.model.encode_prior if self.first else v.model.encode
        self.enc = encode(self.ids, v.defaults, v.default_speaker)
        self.cpu_s += process_cpu_s() - cpu0
        self._phase = "first"

    def _first_chunks(self) -> None:
        v, enc = self.voice, self._encoded()
        for width in (8, 16, 32):  # first chunks: the decoder a listener waits for
            t_dec = time.monotonic()
            decode_span(v.model, enc, 0, min(enc.frames, width), v.context, v.hop, True)
            if width == 16:
                v.costs.first_decode_s = time.monotonic() - t_dec
        enc.ahead = None
        self._phase = "ahead"

    def _ahead(self) -> None:
        """One of the stream's own windows, decoded ahead (each three times the last)."""
        v, enc = self.voice, self._encoded()
        a = self._ahead_at
        if a >= enc.frames:
            if self.first:
                self._finish()
            self._phase = "whole"
            return
        b = min(enc.frames, a + 2 * a)
        cpu0 = process_cpu_s()
        decode_span(v.model, enc, a, b, v.context, v.hop)
        self.cpu_s += process_cpu_s() - cpu0
        self._ahead_at = b

    def _whole(self) -> None:
        """One run of the clause decoded whole, as a ``sentence``-mode chunk is."""
        v, enc = self.voice, self._encoded()
        lo = self._whole_at
        if lo >= enc.frames:
            self._phase = "prior"
            return
        hi = min(enc.frames, lo + MAX_WINDOW_FRAMES)
        enc.ahead = None  # decoded, not served from what the windows ahead left
        decode_span(v.model, enc, lo, hi, v.context, v.hop, ahead=False)
        self._whole_at = hi

    def _prior(self) -> None:
        v = self.voice
        t_prior = time.monotonic()
        v.model.encode_prior(self.ids, v.defaults, v.default_speaker)
        v.costs.prior_s_per_id = (time.monotonic() - t_prior) / len(self.ids)
        self._finish()

    def _encoded(self) -> Encoded:
        assert self.enc is not None
        return self.enc

    def _finish(self) -> bool:
        self.done = True
        log.debug(
            "warm-up of %s, %s clause: %.0f ms",
            self.voice.name,
            "first" if self.first else "a later",
            (time.monotonic() - self._t0) * 1000,
        )
        return True


class IdleWarmUp:
    """Each voice's later clause (see the module), in the background of a serving daemon,
    run by the runtime's ``scheduler``; ``in_flight()``: whether a request is in flight now."""

    def __init__(
        self, voices: list[VoiceRuntime], scheduler: Scheduler, in_flight: Callable[[], bool]
    ) -> None:
        self.voices = voices
        self.scheduler = scheduler
        self.in_flight = in_flight
        self.beside_requests = False
        """A request ran while a step did: the measured cost counts its CPU time too."""

    async def run(self) -> float | None:
        """Every voice warm; the costliest later clause's cost, None when a request ran
        beside a step (then admission keeps its start-up estimate)."""
        t0 = time.monotonic()
        cost: float | None = None
        try:
            for v in self.voices:
                cost = costliest(cost, await self._clause(v))
        except asyncio.CancelledError:
            self.scheduler.cancel_owner(self)  # stopping: nothing left running
            raise
        log.debug("warm-up done in %.0f ms", (time.monotonic() - t0) * 1000)
        return None if self.beside_requests else cost

    async def _clause(self, v: VoiceRuntime) -> float | None:
        job = ClauseWarmUp(v, first=False)
        try:
            while not job.done:
                await self._step(job)
        except Exception as exc:  # the voice's requests fail the same way and say so
            log.warning("warm-up of %s failed: %s", v.name, exc)
            return None
        cost = job.cost()
        if not self.beside_requests:
            await asyncio.to_thread(keep_cost, v, cost)
        return cost

    async def _step(self, job: ClauseWarmUp) -> None:
        """One step, run until it ends with no request beside it (a step stops and runs
        again from its start: see :class:`ClauseWarmUp`)."""
        scheduler = self.scheduler
        while True:
            while self.in_flight():
                await asyncio.sleep(IDLE_POLL_S)
            fut = scheduler.submit(
                job.step,
                deadline=time.monotonic() + 3600.0,
                realtime=False,
                owner=self,
                kind="warmup",
            )
            while not fut.done():
                await asyncio.wait({fut}, timeout=IDLE_POLL_S)
                if self.in_flight() and not fut.done():
                    self.beside_requests = True
                    scheduler.cancel_owner(self)  # stopped; its future is cancelled soon
            if not fut.cancelled():
                fut.result()  # the step's error, if any
                return
