"""Hot failover from the GPU backend to the always-warm CPU backend.

:class:`FailoverVoiceModel` is a :class:`VoiceModel` in front of two others.
Calls go to the *primary* (TensorRT) while the GPU is up.  When the primary
raises, or the watchdog raises an alarm while a call is in flight, the GPU is
marked down and *that same call* is re-run on the CPU from the same host-side
inputs (``z`` lives in RAM, see :class:`~appliance.model.engine.base.Encoded`): the
stream goes on, nothing is lost.  After the watchdog has reported the GPU
healthy for ``recovery_healthy_s``, a factory re-creates the primary in the
background and calls switch back.

Primary calls run on one daemon thread: a TensorRT execution context serves
one call at a time anyway, and a caller can stop waiting for a GPU that hangs
(a link that dropped mid-transfer) instead of hanging with it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from appliance.model.engine.base import BackendError, Encoded, Scales, VoiceModel, Window
from appliance.speech import FloatArray, IntArray

log = logging.getLogger(__name__)

T = TypeVar("T")

_RERUN_COUNTER = {
    "window": "rerun_windows",
    "encode": "rerun_encodes",
    "flow": "rerun_flows",
    "fused": "rerun_fused",
}


class UnsupportedInput(BackendError):
    """The primary cannot take this input (outside its engine profile); not a GPU fault.

    The pool runs such a call on the CPU and leaves the GPU up.
    """


class _Stoppable(Protocol):
    def stop(self) -> None: ...


class _Abandoned(Exception):
    """The GPU went down while this call was waiting for it."""


class _GpuWorker:
    """A daemon thread that runs primary calls one at a time."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the waiting caller
                fut.set_exception(exc)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        fut: Future[T] = Future()
        self._jobs.put((fn, fut))
        return fut

    def stop(self) -> None:
        """Let the thread end after its current job (it may be stuck in a dead GPU)."""
        self._jobs.put(None)


class FailoverVoiceModel(VoiceModel):
    """The primary while it is healthy, the CPU model otherwise; never loses a call."""

    def __init__(
        self,
        primary: VoiceModel | None,
        cpu: VoiceModel,
        *,
        factory: Callable[[], VoiceModel] | None = None,
        recovery_healthy_s: float = 60.0,
        watchdog_active: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cpu = cpu
        self._primary = primary
        self._factory = factory
        self._recovery_healthy_s = recovery_healthy_s
        self._watchdog_active = watchdog_active
        self._clock = clock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._state = "ok" if primary is not None else "absent"
        self._epoch = 0
        self._worker: _GpuWorker | None = _GpuWorker("gpu-0") if primary is not None else None
        self._down_since: float | None = None
        self._healthy_since: float | None = None
        self._down_reason = ""
        self._last_alarm: dict[str, Any] | None = None
        self._watchdog: _Stoppable | None = None
        self._counts = {"failovers": 0, "rerun_windows": 0, "rerun_encodes": 0, "rerun_flows": 0}
        self._counts["rerun_fused"] = 0
        self._counts.update({"recoveries": 0, "recovery_failures": 0})
        self.backend_name = primary.backend_name if primary is not None else cpu.backend_name

    @property
    def cpu(self) -> VoiceModel:
        """The CPU model: always loaded, the one every call falls back to."""
        return self._cpu

    # ------------------------------------------------------------------ VoiceModel
    # Every member of VoiceModel is forwarded here (tests/engine/test_pool.py checks
    # that none is inherited): a capability of the backends must not vanish behind the pool.

    def encode(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        return self._run("encode", lambda m: m.encode(ids, scales, speaker), _unseeded(scales))

    @property
    def flow_context(self) -> int:
        """The CPU model's: it is always there to finish a clause's flow, whatever ran the prior.

        A primary with a flow of its own takes flow windows only when this context is
        enough for it (see :meth:`flow`); one without returns ``z`` complete from
        ``encode_prior`` and is never asked for a flow.
        """
        return self._cpu.flow_context

    @property
    def retimes(self) -> bool:
        """The primary's while it is up, else the CPU model's (a call that lands on the
        other one meanwhile still honours the rate, through the length scale)."""
        with self._lock:
            primary = self._primary if self._state == "ok" else None
        return (primary or self._cpu).retimes

    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        return self._run(
            "encode", lambda m: m.encode_prior(ids, scales, speaker), _unseeded(scales)
        )

    def flow(self, window: Window) -> FloatArray:
        # The prior may have run on the CPU while the GPU was down and the GPU be back
        # now: a primary without a (compatible) flow leaves the window to the CPU.
        context = self._cpu.flow_context
        return self._run(
            "flow",
            lambda m: m.flow(window),
            usable=lambda m: 0 < m.flow_context <= context,
        )

    def decode(self, window: Window) -> FloatArray:
        return self._run("window", lambda m: m.decode(window))

    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        return self._run("fused", lambda m: m.fused(ids, scales, speaker))

    def release_memory(self) -> None:
        self._cpu.release_memory()
        primary = self._primary
        if primary is not None:
            primary.release_memory()

    def close(self) -> None:
        """Stop the watchdog and release both models."""
        if self._watchdog is not None:
            self._watchdog.stop()
        with self._lock:
            primary, self._primary = self._primary, None
            worker, self._worker = self._worker, None
            self._epoch += 1
            self._cond.notify_all()
        if worker is not None:
            worker.stop()
        if primary is not None:
            _close_quietly(primary)
        self._cpu.close()

    # ------------------------------------------------------------------ watchdog side

    def attach_watchdog(self, watchdog: _Stoppable) -> None:
        """Own the watchdog feeding this pool, so that :meth:`close` stops it."""
        self._watchdog = watchdog
        self._watchdog_active = True

    def notify_alarm(self, kind: str, reason: str, when: float | None = None) -> None:
        """A watchdog alarm: the GPU is down from now; in-flight calls move to the CPU."""
        with self._lock:
            self._last_alarm = {"kind": kind, "reason": reason, "time": when or time.time()}
            self._healthy_since = None
            self._mark_down_locked(self._epoch, f"watchdog: {kind}: {reason}")

    def notify_health(self, healthy: bool) -> None:
        """One watchdog reading; a run of healthy ones long enough brings the GPU back."""
        with self._lock:
            if not healthy:
                self._healthy_since = None
                return
            if self._healthy_since is None:
                self._healthy_since = self._clock()
        self._maybe_recover()

    def state(self) -> dict[str, Any]:
        """For ``health`` and ``stats``: what runs now, and what happened to the GPU."""
        with self._lock:
            on_gpu = self._state == "ok"
            state = {
                "backend": self._primary_name() if on_gpu else self._cpu.backend_name,
                "gpu": self._state,
                "gpu_down_reason": self._down_reason or None,
                **self._counts,
                "last_alarm": dict(self._last_alarm) if self._last_alarm else None,
            }
            graph_stats = getattr(self._primary, "graph_stats", None)
        if callable(graph_stats):
            # Read outside the pool lock: it must never wait behind a stuck GPU call.
            state["cuda_graphs"] = graph_stats()
        return state

    # ------------------------------------------------------------------ internals

    def _primary_name(self) -> str:
        return self._primary.backend_name if self._primary is not None else "none"

    def _run(
        self,
        what: str,
        call: Callable[[VoiceModel], T],
        usable: Callable[[VoiceModel], bool] | None = None,
    ) -> T:
        """``call`` on the primary if it is up (and ``usable`` for it), else on the CPU."""
        self._maybe_recover()
        with self._lock:
            primary = self._primary if self._state == "ok" else None
            worker = self._worker
            epoch = self._epoch
        if primary is None or worker is None or (usable is not None and not usable(primary)):
            return call(self._cpu)
        try:
            return self._on_primary(worker, epoch, lambda: call(primary))
        except UnsupportedInput as exc:
            log.debug("primary declined a call (%s); running it on the CPU", exc)
            return call(self._cpu)
        except _Abandoned as exc:
            reason = str(exc)
        except Exception as exc:  # any primary failure means: GPU down, re-run on the CPU
            reason = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._mark_down_locked(epoch, f"backend error: {reason}")
        with self._lock:
            self._counts[_RERUN_COUNTER[what]] += 1
        log.warning("re-running an in-flight %s on the CPU (%s)", what, reason)
        return call(self._cpu)

    def _on_primary(self, worker: _GpuWorker, epoch: int, fn: Callable[[], T]) -> T:
        fut = worker.submit(fn)
        fut.add_done_callback(self._wake)
        with self._cond:
            while not fut.done() and self._epoch == epoch:
                self._cond.wait()
            if not fut.done():
                raise _Abandoned(self._down_reason)
        return fut.result()

    def _wake(self, _fut: Future[Any]) -> None:
        with self._cond:
            self._cond.notify_all()

    def _mark_down_locked(self, epoch: int, reason: str) -> None:
        if epoch != self._epoch or self._state not in ("ok", "recovering"):
            return  # another caller or the watchdog got there first
        was = self._state
        self._epoch += 1
        self._state = "down"
        self._down_reason = reason
        self._down_since = self._clock()
        self._healthy_since = None
        self._cond.notify_all()
        if was == "recovering":
            return  # the recovery thread sees the new epoch and discards its model
        self._counts["failovers"] += 1
        primary, self._primary = self._primary, None
        worker, self._worker = self._worker, None
        log.error(
            "GPU backend DOWN, every call now runs on the CPU (%s). "
            "The GPU is retried after %.0f s of healthy readings.",
            reason,
            self._recovery_healthy_s,
        )
        if worker is not None:
            if primary is not None:  # queued behind any call still stuck on the device
                worker.submit(lambda: _close_quietly(primary))
            worker.stop()

    def _maybe_recover(self) -> None:
        with self._lock:
            if self._state != "down" or self._factory is None:
                return
            since = self._healthy_since if self._watchdog_active else self._down_since
            if since is None or self._clock() - since < self._recovery_healthy_s:
                return
            self._state = "recovering"
            epoch = self._epoch
            factory = self._factory
        log.warning("GPU healthy for %.0f s: re-initialising TensorRT", self._recovery_healthy_s)
        threading.Thread(
            target=self._recover, args=(epoch, factory), name="gpu-recover", daemon=True
        ).start()

    def _recover(self, epoch: int, factory: Callable[[], VoiceModel]) -> None:
        try:
            model = factory()
        except Exception as exc:  # stay on the CPU and wait for another healthy period
            with self._lock:
                if self._epoch == epoch and self._state == "recovering":
                    self._state = "down"
                    self._down_since = self._clock()
                    self._healthy_since = None
                self._counts["recovery_failures"] += 1
            log.warning("GPU re-initialisation failed, staying on the CPU: %s", exc)
            return
        with self._lock:
            if self._epoch != epoch or self._state != "recovering":
                stale = True
            else:
                stale = False
                self._primary = model
                self._worker = _GpuWorker(f"gpu-{epoch + 1}")
                self._state = "ok"
                self._down_reason = ""
                self._counts["recoveries"] += 1
        if stale:
            _close_quietly(model)
            return
        log.warning("GPU backend back UP: calls run on %s again", model.backend_name)


def _close_quietly(model: VoiceModel) -> None:
    try:
        model.close()
    except Exception as exc:  # the device may already be gone; nothing left to free
        log.debug("closing %s failed: %s", model.backend_name, exc)


def _unseeded(scales: Scales) -> Callable[[VoiceModel], bool] | None:
    """Seeded noise (``Scales.seed``) is drawn by the CPU model's prior: a GPU encoder
    draws its own, so a seeded encode runs on the CPU."""
    return None if scales.seed is None else (lambda _m: False)
