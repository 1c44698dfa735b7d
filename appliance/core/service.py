"""The service core every door calls: one request path, one registry of live streams.

A door (protocol v1, Wyoming, HTTP, …) turns its wire messages into a
:class:`~appliance.speech.SpeechRequest`, then::

    stream = await service.open_stream(req, door="wyoming")   # ServiceError if refused
    result = await stream.run(emit)        # emit(chunk) for every Chunk; ServiceError on failure

``open_stream`` does everything a request needs before its first work item: the
daemon-wide cap, admission (``busy``), voice and speaker, the frontend (in the
service's own bounded executor; of a long one-shot text, its head only — the rest is
prepared while the head is spoken and ends the request with its error if it fails:
appliance.core.headfirst).  ``run`` produces the chunks on the shared
scheduler; ``emit`` applies the door's back-pressure by taking its time.
``cancel`` (a client's cancel, a disconnect) ends ``run`` at once with
``result.cancelled``; the daemon's shutdown ends it with ``shutting_down``.
Text that streams in: ``SpeechRequest(text_stream=True)``, then
``stream.append(text)`` / ``stream.finish()`` while ``run`` is going.

Every live stream, whatever door it came through, is in :attr:`Service.streams`
(appliance.core.registry): admission, ``stats``, ``health`` (appliance.core.reports) and
graceful shutdown all read that one registry.  Nothing here imports a wire format.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from appliance.core.admission import (
    RTF_PRIOR,
    Admission,
    CpuShare,
    Decision,
    Pressure,
    StreamLoad,
)
from appliance.core.registry import DoorCount, StreamRegistry
from appliance.core.reports import Reports
from appliance.core.runtime import Runtime
from appliance.core.streaming import JobSettings, JobStats, SynthesisJob, VoiceRuntime
from appliance.core.textprep import TextPrep
from appliance.core.textstream import TextFeed
from appliance.errors import ErrorCode, ServiceError
from appliance.model import stretch
from appliance.model.engine.base import Scales
from appliance.model.engine.threads import own_cores
from appliance.ops.config import Config
from appliance.ops.cpuquota import capped_cpus
from appliance.playback import NoAudioDevice, Utterance
from appliance.playback.speak import Speech
from appliance.speech import Chunk, SpeechRequest, Viseme
from appliance.text.frontend import FrontendLimits

log = logging.getLogger(__name__)
reqlog = logging.getLogger("ttsd.request")

Emit = Callable[[Chunk], Awaitable[None]]

DETERMINISTIC_SEED = 0x74747364
"""The seed of every deterministic request ("ttsd"): each encoder call mixes in its own
phoneme ids, scales and speaker (appliance.model.noise.call_seed), so a phrase sounds the
same in any request, and different phrases differ."""


@dataclass
class StreamResult:
    stats: dict[str, Any]
    cancelled: bool
    interrupted: bool | None = None
    """``speak`` only: cut off by a newer utterance."""
    reason: str = "end"
    heard: tuple[int, int] | None = None
    """``speak`` with word timings: the span of the text fully played."""
    sent_text_span: tuple[int, int] | None = None
    """A cancelled request: how far in the text the audio handed to the door reaches
    (:meth:`Stream.sent_text_span`); None when it was not cancelled or sent nothing."""


class SentText:
    """[start, end) of the text the chunks handed to a door speak, for barge-in: to the end
    of the last word whose sound has started in them (with ``word_timings``), else of the
    last clause a chunk of them came from (a clause's audio may be cut in its middle).  An
    agent truncates its context to this after a cancel.  Keep-alives and pauses say
    nothing."""

    def __init__(self) -> None:
        self.span: tuple[int, int] | None = None

    def note(self, chunk: Chunk) -> None:
        if chunk.words is not None:
            if not chunk.words:
                return
            lo, hi = chunk.words[0].text_span[0], chunk.words[-1].text_span[1]
        elif chunk.samples.size:
            lo, hi = chunk.text_span
        else:
            return
        if self.span is not None:
            lo, hi = min(self.span[0], lo), max(self.span[1], hi)
        self.span = (lo, hi)


@dataclass(eq=False)
class Stream:
    """One live request.  Created by :meth:`Service.open_stream`; ``run`` it exactly once."""

    service: Service
    request: SpeechRequest
    door: str
    """The door it came through (its name: "protocol-v1", "wyoming", "http")."""
    voice: VoiceRuntime
    speaker: int | None
    t_request: float
    label: dict[str, Any] | None = None
    """The door's name for it (connection and id), for ``stats``."""
    number: int = field(init=False)
    job: SynthesisJob | None = field(default=None, init=False)
    feed: TextFeed | None = field(default=None, init=False)
    tail: asyncio.Task[None] | None = field(default=None, init=False)
    """A one-shot text's rest, being prepared after its head (appliance.core.headfirst)."""
    cancel_reason: str | None = field(default=None, init=False)
    _failure: ServiceError | None = field(default=None, init=False)
    _run_task: asyncio.Task[Any] | None = field(default=None, init=False)
    _job_task: asyncio.Task[None] | None = field(default=None, init=False)
    utterance: Utterance | None = field(default=None, init=False)
    _done: bool = field(default=False, init=False)
    _sent: SentText = field(default_factory=SentText, init=False)

    def __post_init__(self) -> None:
        self.number = self.service.registry.number()

    # -- what the door reads

    @property
    def sample_rate(self) -> int:
        return self.voice.sample_rate

    @property
    def voice_name(self) -> str:
        return self.voice.name

    @property
    def realtime(self) -> bool:
        return self.request.realtime

    def buffer_s(self) -> float:
        """Audio the client holds but has not played yet (if it plays in real time)."""
        return self.job.buffer_s() if self.job is not None else 0.0

    def audio_left_s(self) -> float | None:
        """Like :meth:`buffer_s`, None before the first chunk."""
        if self.job is None or self.job.stats.t_first is None:
            return None
        return self.job.buffer_s()

    # -- control

    def append(self, text: str, flush: bool = False) -> None:
        """More text for a ``text_stream`` request (ServiceError when it is not open)."""
        if self.feed is None:
            raise ServiceError(ErrorCode.BAD_REQUEST, "this request does not take more text")
        self.feed.append(text, flush=flush)

    def finish(self) -> None:
        """No more text comes; the request ends after its last audio."""
        if self.feed is None:
            raise ServiceError(ErrorCode.BAD_REQUEST, "this request does not take more text")
        self.feed.finish()

    @property
    def takes_text(self) -> bool:
        return self.feed is not None and not (self.feed.finished or self.feed.failed)

    def cancel(self, reason: str = "cancel") -> None:
        """Stop at once: queued work is dropped, running work stopped, ``run`` returns."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self._job_task is not None and not self._job_task.done():
            self._job_task.cancel()
        if self.utterance is not None:
            self.utterance.cancel()
        if self.job is not None:
            self.job.cancel_pending()

    def fail(self, exc: ServiceError) -> None:
        """End the request with ``exc`` (its text went wrong while it was speaking)."""
        if self._failure is None and self.cancel_reason is None:
            self._failure = exc
            if self._job_task is not None and not self._job_task.done():
                self._job_task.cancel()
            if self.utterance is not None:
                self.utterance.cancel()

    # -- views

    def load(self) -> StreamLoad:
        producing = not self._done and (self._job_task is None or not self._job_task.done())
        if self.job is None:
            return StreamLoad(self.realtime, producing)
        st = self.job.stats
        return StreamLoad(
            self.realtime, producing, st.compute_s, st.audio_s, self.job.remaining_audio_s()
        )

    def snapshot(self) -> dict[str, Any]:
        # "frontend": the door, in protocol v1's ``stats`` (a contract; see core/reports).
        d: dict[str, Any] = {"stream": self.number, "frontend": self.door}
        if self.label:
            d.update(self.label)
        job = self.job
        d.update(
            buffer_ms=round(job.buffer_s() * 1000, 1) if job else 0.0,
            audio_ms=round(job.stats.audio_s * 1000, 1) if job else 0.0,
            stalls=job.stats.stalls if job else 0,
        )
        d["realtime"] = self.realtime
        return d

    # -- running

    async def run(self, emit: Emit) -> StreamResult:
        """Produce every chunk through ``emit``.  Raises ServiceError (``shutting_down``,
        ``text_too_long``, ``internal`` …); exceptions ``emit`` raises pass through as they are."""
        assert self.job is not None, "speak streams run through run_speech"
        job = self.job
        door_exc: list[BaseException] = []

        async def guarded(chunk: Chunk) -> None:
            if self.cancel_reason is not None:
                return  # barge-in: nothing made after the cancel arrived goes out
            try:
                await emit(chunk)
            except BaseException as exc:
                door_exc.append(exc)
                raise
            self._sent.note(chunk)

        outcome = "error"
        stats: dict[str, Any] = {}
        try:
            if self._failure is not None:
                # Failed before it ran (its first text was over the limit): end now; its
                # job would wait for clauses that never come.
                raise self._failure
            self._job_task = asyncio.create_task(job.run(guarded))
            if self.cancel_reason is not None:
                self._job_task.cancel()  # cancelled before it started
            try:
                await self._job_task
            except asyncio.CancelledError:
                if self.cancel_reason is None and self._failure is None:
                    raise  # the door's own task was cancelled
            self._raise_if_ended()
            stats = job.stats.to_dict()
            if self.realtime and self.cancel_reason is None:
                self.service.admission.observe(job.stats.compute_s, job.stats.audio_s)
            cancelled = self.cancel_reason is not None
            outcome = "cancelled" if cancelled else "end"
            self.service.runtime.metrics.request_done(stats, cancelled, self.door)
            sent = self.sent_text_span() if cancelled else None
            return StreamResult(stats, cancelled, reason=outcome, sent_text_span=sent)
        except ServiceError as exc:
            outcome = exc.code
            raise
        except Exception as exc:
            if door_exc and exc is door_exc[0]:
                # The door's own failure (its client went away or stopped reading): the
                # door reports it; here it only names the outcome in the request log.
                outcome = "door:" + str(getattr(exc, "code", type(exc).__name__))
                raise
            # A bug or a backend failure must end this request, not the daemon.
            log.exception("stream %d failed", self.number)
            outcome = ErrorCode.INTERNAL
            raise ServiceError(ErrorCode.INTERNAL, type(exc).__name__) from exc
        finally:
            door_exc.clear()  # its traceback holds ``guarded``'s frame, which holds the list
            self._end(outcome, stats)

    def sent_text_span(self) -> tuple[int, int] | None:
        """How far in the text the audio handed to the door reaches (:class:`SentText`)."""
        return self._sent.span

    def _raise_if_ended(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self.cancel_reason == "shutdown":
            raise ServiceError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")

    def _end(self, outcome: str, stats: dict[str, Any]) -> None:
        if self._done:
            return
        self._done = True
        if self._job_task is not None and self._job_task.done():
            # A failed job's task keeps its exception, whose traceback holds the door's
            # frames and through them this stream: a cycle only a collection frees.
            self._job_task = None
        if self.job is not None:
            self.job.cancel_pending()
            if not stats:
                stats = self.job.stats.to_dict()
        if self.feed is not None:
            self.feed.close()
        if self.tail is not None:
            self.tail.cancel()
        if outcome not in ("end", "cancelled") and not outcome.startswith("door:"):
            self.service.record_error(outcome)
        self.service.registry.remove(self)
        reqlog.info(  # frontend=: the door (the request log's field, read by tools)
            "stream=%d frontend=%s label=%s chars=%d result=%s ttfp_ms=%s audio_ms=%s rtf=%s",
            self.number,
            self.door,
            self.label,
            len(self.feed.text) if self.feed is not None else len(self.request.text),
            outcome,
            stats.get("ttfp_ms"),
            stats.get("audio_ms"),
            stats.get("rtf"),
        )

    def close(self) -> None:
        """Release a stream that will not be run (the door failed before ``run``)."""
        if self._done:
            return
        self.cancel("closed")
        self._end("cancelled", {})

    # -- speech on the device

    async def run_speech(
        self,
        on_queued: Callable[[int], Awaitable[None]],
        on_started: Callable[[float], None],
        on_mark: Callable[[str], None] | None = None,
        on_word: Callable[[tuple[int, int]], None] | None = None,
        on_viseme: Callable[[Viseme], None] | None = None,
    ) -> StreamResult:
        """``speak``: synthesize into the player; ``on_queued(position)``, then
        ``on_started(latency_ms)`` when the first sample reaches the device, and
        ``on_mark(name)`` for each SSML mark (``on_word(text_span)`` for each word, with
        word timings; ``on_viseme(viseme)`` for each mouth shape, with visemes) when the
        device is handed its sample."""
        outcome = "error"
        stats: dict[str, Any] = {}
        try:
            if self._failure is not None:
                raise self._failure  # failed before it ran (see run)
            utt = self._utterance()
            await on_queued(utt.position)
            if self.cancel_reason is not None:
                utt.cancel()
            waited_ms = (utt.created - self.t_request) * 1000.0
            speech = Speech(utt, on_started, on_mark, waited_ms, on_word, on_viseme)
            info = await speech.play(self._produce)
            self._raise_if_ended()
            assert self.job is not None
            stats = {**self.job.stats.to_dict(), **info.stats, "reason": info.reason}
            if info.reason == "device_lost":
                raise ServiceError(ErrorCode.NO_AUDIO_DEVICE, "the audio device was lost")
            cancelled = info.cancelled or self.cancel_reason is not None
            outcome = "cancelled" if cancelled else info.reason
            self.service.runtime.metrics.request_done(stats, cancelled, self.door)
            heard = speech.heard() if self.request.word_timings else None
            return StreamResult(stats, cancelled, info.interrupted, outcome, heard)
        except ServiceError as exc:
            outcome = exc.code
            raise
        except Exception as exc:
            log.exception("speech %d failed", self.number)
            outcome = ErrorCode.INTERNAL
            raise ServiceError(ErrorCode.INTERNAL, type(exc).__name__) from exc
        finally:
            self._end(outcome, stats)

    def _utterance(self) -> Utterance:
        """This request's place in the player's queue (ServiceError when it has none)."""
        player = self.service.runtime.player
        if player is None:
            raise ServiceError(ErrorCode.NO_AUDIO_DEVICE, "playback is off in this daemon")
        req = self.request
        try:
            utt = player.submit(req.priority, req.volume, self.voice.sample_rate, self.service_key)
        except NoAudioDevice as exc:
            raise ServiceError(ErrorCode.NO_AUDIO_DEVICE, str(exc) or "no audio device") from exc
        except ValueError as exc:
            raise ServiceError(ErrorCode.BAD_REQUEST, str(exc)) from exc
        self.utterance = utt
        return utt

    async def _produce(self, emit: Emit) -> None:
        """The job, as its own task (``cancel`` stops it), into ``emit``."""
        assert self.job is not None
        self._job_task = asyncio.create_task(self.job.run(emit))
        with contextlib.suppress(asyncio.CancelledError):
            await self._job_task

    service_key: Hashable = None
    """Whose speech a ``stop`` silences (set by the door: the peer's uid)."""


@dataclass
class Service:
    """The transport-neutral core: requests in, chunks out; one registry for every door."""

    runtime: Runtime
    """What requests are served from: frozen; a reload swaps in a new one whole
    (:meth:`swap_runtime`)."""
    admission: Admission = field(init=False)
    stopping: bool = False
    """The stop (appliance.daemon): new requests are refused with ``shutting_down`` while
    those in flight finish (:meth:`shutdown`)."""
    draining: bool = False
    """SIGTERM's drain notice (appliance.daemon), before the stop: still serving, but telling
    balancers to move new work away (health says ``draining``; appliance.core.capacity
    says ``drain``).  "Draining" means this notice only; the stop is :attr:`stopping`."""

    def __post_init__(self) -> None:
        sched = self.runtime.scheduler
        # Each stream's cost in CPU time, not in worker wall time that contention inflates.
        self.admission = Admission(
            sched.capacity,
            rtf_prior=self.runtime.stream_cost or RTF_PRIOR,
            cpu_share=CpuShare(lambda: sched.busy_s),
        )
        self.registry: StreamRegistry[Stream] = StreamRegistry()
        self.reports = Reports(self)
        self.text = TextPrep(lambda: self.runtime)
        self._warmup: asyncio.Future[Any] | None = None
        self._speaker = asyncio.Event()
        self._speaker.set()
        self.runtime.metrics.watch(self.reports.live_numbers)

    def swap_runtime(self, runtime: Runtime) -> None:
        """Serve from ``runtime`` from now on: a reload's new one (appliance.reload's
        Reloader is the one caller).  Requests in flight keep the voice they resolved; the
        scheduler, metrics and warm-up state are the same objects in both."""
        self.runtime = runtime

    def set_cpu_quota(self, quota: float | None) -> None:
        """The process's CPU quota changed while serving (appliance.quotawatch): the
        scheduler and admission count the new one from the next decision on, and the
        workers have cores of their own only while the quota leaves one each."""
        scheduler = self.runtime.scheduler
        scheduler.set_quota(quota)
        self.admission.workers = scheduler.capacity
        if (plan := self.runtime.plan) is not None:
            workers = self.runtime.config.engine.workers
            scheduler.own_cores = own_cores(plan.threads, workers, capped_cpus(quota))

    def hold_speech(self) -> None:
        """``speak`` waits (before admission) until :meth:`release_speech`: the daemon
        serves everything else while its speaker starts."""
        self._speaker.clear()

    def release_speech(self) -> None:
        """The speaker runs, or is known to be missing: take ``speak`` requests."""
        self._speaker.set()

    @property
    def warm(self) -> bool:
        """A request now gets its first packet (and ``speak`` its first sound) as quickly as
        any later one: the voices' first packets are warm and the speaker runs or is known
        to be missing (``ping``, ``health`` and ``info`` say it; issue 42)."""
        return self.runtime.first_packets_warm and self._speaker.is_set()

    # ------------------------------------------------------------ requests

    async def open_stream(
        self,
        req: SpeechRequest,
        *,
        door: str,
        label: dict[str, Any] | None = None,
        speak_key: Hashable = None,
    ) -> Stream:
        """Admit and prepare one request.  Raises ServiceError when it is refused."""
        t0 = time.monotonic()
        if speak_key is not None and not self._speaker.is_set():
            await self._speaker.wait()  # start-up: the speaker is still starting
        speak = speak_key is not None
        try:
            voice, sid = self._admit(req, speak)
        except ServiceError as exc:
            self.record_error(exc.code)
            raise
        stream = Stream(self, req, door, voice, sid, t0, label)
        stream.service_key = speak_key
        self.registry.add(stream)
        try:
            prepared = await self.text.clauses(req, voice, stream.fail, stream.audio_left_s)
            stream.feed, stream.tail = prepared.feed, prepared.tail
            # Closed on failure too: a text's rest may be being prepared (headfirst).
            settings = job_settings(self.runtime.config, req, voice, sid, speak)
        except BaseException as exc:
            stream.close()
            if isinstance(exc, ServiceError):
                self.record_error(exc.code)
            raise
        jstats = JobStats(t_request=t0, frontend_ms=(time.monotonic() - t0) * 1000)
        stream.job = SynthesisJob(voice, prepared.queue, settings, self.runtime.scheduler, jstats)
        return stream

    def _admit(self, req: SpeechRequest, speak: bool) -> tuple[VoiceRuntime, int | None]:
        """The checks before any work: shutting down, the request's own fields, the
        daemon-wide cap, the voice and speaker, admission (``busy``)."""
        if self.stopping:
            raise ServiceError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
        req.validate()
        cap = self.runtime.config.limits.max_streams
        if len(self.streams) >= cap:
            raise ServiceError(
                ErrorCode.TOO_MANY_REQUESTS, f"the daemon has {cap} requests in flight"
            )
        if req.text_format == "ssml" and req.text_stream:
            # An SSML document is parsed whole; a stream of text has no end to wait for.
            raise ServiceError(
                ErrorCode.BAD_REQUEST, "text_format 'ssml' cannot be used with text_stream"
            )
        voice, sid = self.resolve_voice(req.voice, req.speaker, req.language)
        if req.realtime and not (speak and self._cuts_speech(req.priority)):
            # Batch requests are always taken: they only use time no stream needs.
            decision = self.admit()
            if not decision.admit:
                raise ServiceError(
                    ErrorCode.BUSY,
                    f"busy: {decision.reason}",
                    retry_after_ms=decision.retry_after_ms,
                )
        return voice, sid

    def _cuts_speech(self, priority: str) -> bool:
        """A ``speak`` that will cut what is speaking takes that speech's place: the cut
        one stops producing at its next chunk, so admitting it adds no load.  Refusing it
        as ``busy`` would leave the late speech it was sent to silence playing on (a
        screen reader's message behind the text it interrupts)."""
        player = self.runtime.player
        return player is not None and player.cuts(priority)

    async def phonemes(
        self, text: str, voice_name: str | None, text_format: str = "text"
    ) -> dict[str, Any]:
        """What ``voice_name`` says for ``text``, word by word (see appliance.text.report)."""
        from appliance.text.report import phoneme_report

        try:
            voice, _ = self.resolve_voice(voice_name, None)
            clauses = await self.text.prepare_text(
                text, voice.language, self.frontend_limits(), text_format
            )
            loop = asyncio.get_running_loop()
            report = await loop.run_in_executor(
                self.text.pool, phoneme_report, clauses, voice.phonemizer
            )
        except ServiceError as exc:
            self.record_error(exc.code)
            raise
        return {"voice": voice.name, "clauses": report}

    def resolve_voice(
        self, name: str | None, speaker: str | int | None, language: str | None = None
    ) -> tuple[VoiceRuntime, int | None]:
        """See :meth:`Runtime.resolve_voice`."""
        return self.runtime.resolve_voice(name, speaker, language)

    def frontend_limits(self) -> FrontendLimits:
        return self.runtime.frontend_limits()

    def admit(self) -> Decision:
        """Admission decision for one new real-time request."""
        cfg = self.runtime.config.scheduler
        return self.admission.decide(cfg, self.stream_loads(), self.admission_pressure())

    def admission_pressure(self) -> Pressure:
        """What admission weighs of the scheduler (the balancer's
        :func:`~appliance.core.capacity.capacity_of` judges with the same)."""
        sched = self.runtime.scheduler
        window_s = self.runtime.config.scheduler.admission_window_s
        return Pressure(sched.mean_lateness_s(window_s), sched.overdue_s(), sched.cpu_wait.share)

    def stream_loads(self) -> list[StreamLoad]:
        return [s.load() for s in self.streams]

    def record_error(self, code: str) -> None:
        self.runtime.metrics.error(code)

    async def warmup(self) -> None:
        """Run every voice once, as batch work on the scheduler (never ahead of a stream).

        Concurrent calls share one run, so a burst of them costs one warm-up."""
        if self._warmup is None or self._warmup.done():
            self._warmup = self.runtime.scheduler.submit(
                self.runtime.warm_up,
                deadline=time.monotonic() + 3600.0,
                realtime=False,
                owner=self,
                kind="warmup",
            )
        await asyncio.shield(self._warmup)

    def stop_speech(self, key: Hashable) -> None:
        if self.runtime.player is not None:
            self.runtime.player.stop(key)

    # ------------------------------------------------------------ registry and reports

    @property
    def streams(self) -> set[Stream]:
        """Every live stream, whatever door it came through (:class:`StreamRegistry`)."""
        return self.registry.streams

    @property
    def doors(self) -> list[DoorCount]:
        return self.registry.doors

    @property
    def on_request_done(self) -> list[Callable[[Stream], None]]:
        return self.registry.on_request_done

    def add_door(self, name: str, connections: Callable[[], int]) -> None:
        """A door reports its open connections to ``stats``."""
        self.registry.add_door(name, connections)

    def info(self) -> dict[str, Any]:
        return self.reports.info()

    def stats(self) -> dict[str, Any]:
        return self.reports.stats()

    def health(self) -> dict[str, Any]:
        return self.reports.health()

    # ------------------------------------------------------------ shutdown

    async def shutdown(self, timeout_s: float) -> None:
        """Refuse new requests, let live ones finish up to ``timeout_s``, end the rest
        with ``shutting_down``.  The doors close their listeners first."""
        self.stopping = True
        if self.streams:
            log.info("waiting up to %.1f s for %d streams", timeout_s, len(self.streams))
        if not await self.registry.wait_idle(timeout_s):
            log.warning("ending %d streams that did not finish in time", len(self.streams))
            for s in list(self.streams):
                s.cancel("shutdown")
            await self.registry.wait_idle(2.0)

    def close(self) -> None:
        self.text.close()


def job_settings(
    cfg: Config, req: SpeechRequest, voice: VoiceRuntime, sid: int | None, speak: bool
) -> JobSettings:
    """How the job renders ``req``: its fields over the voice's and the config's defaults
    (ServiceError for a speed that needs libsonic where there is none)."""
    d = voice.defaults
    fixed = cfg.voices.deterministic if req.deterministic is None else req.deterministic
    speed = req.speed or 1.0
    voice_speed = min(speed, stretch.VOICE_SPEED_LIMIT)
    if speed > voice_speed and not stretch.available():
        raise ServiceError(
            ErrorCode.BAD_REQUEST,
            f"'speed' above {stretch.VOICE_SPEED_LIMIT:g} needs libsonic (libsonic0)",
        )
    return JobSettings(
        stretch_speed=speed if speed > voice_speed else None,
        scales=Scales(
            d.noise_scale if req.noise_scale is None else req.noise_scale,
            d.length_scale,
            d.noise_w if req.noise_w is None else req.noise_w,
            seed=DETERMINISTIC_SEED if fixed else None,
            rate=voice_speed,
        ),
        deterministic=fixed,
        speaker=sid,
        mode=req.mode or cfg.streaming.default_mode,
        realtime=req.realtime,
        context=voice.context,
        watermark_s=cfg.scheduler.watermark_ms / 1000.0,
        join_fade_ms=cfg.streaming.join_fade_ms,
        # The player applies the volume of speech on the device itself.
        volume=1.0 if speak else req.volume,
        quick_start=cfg.streaming.quick_start,
        max_phonemes=cfg.engine.max_phonemes,
        word_timings=req.word_timings,
        visemes=req.visemes,
        text_stream=req.text_stream,
        eager=req.text_stream and req.text_start == "eager",
        keepalive_ms=float(req.keepalive_ms or 0) if req.text_stream else 0.0,
    )
