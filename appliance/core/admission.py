"""Admission control: say ``busy`` to a new real-time stream rather than let every stream stutter.

Two rules, either one refuses (see docs/scheduling.md):

* **Projection.**  Every real-time stream that still has audio to produce will
  need ``rtf`` CPU seconds per second of audio, and is consumed at 1x, so
  it claims ``rtf`` of one worker for as long as it runs.  If the streams
  already admitted plus the newcomer would claim more than ``max_load`` of
  the workers, the newcomer is refused.  ``rtf`` is measured, not assumed: the
  pooled compute/audio of the live streams and of recently finished ones, so
  a slower machine admits fewer (one whose cores something else is using: below).
* **Observed backlog** (the seed's rule).  If real-time work has on average
  finished more than ``admission_backlog_ms`` past its deadline over the last
  ``admission_window_s``, or the most urgent queued item already is that late,
  the daemon is behind whatever the projection says, and refuses until it
  has caught up.

Beside other work on the box the projection's limit shrinks.  Its costs are CPU time, which
a CPU hog does not raise, while the CPU the daemon can get falls: beside two ``yes`` hogs
on two cores streams stalled within the limit (docs/scheduling.md, "Admission beside other
work").  The scheduler's run-queue wait (:mod:`appliance.ops.cpuwait`: the share of the
daemon threads' runnable time spent waiting for a CPU) measures it.  Up to
``admission_cpu_wait`` the limit holds in full (the daemon's own threads outnumber the
cores at moments: 0.1–0.4 on a quiet box); beyond it, the limit is
``max_load × (1 − wait) / (1 − admission_cpu_wait)``, in proportion to the CPU time the
threads get when they could run.  Without a reading (no schedstat) it holds in full.

Neither rule refuses a stream when no other real-time stream is producing: with
nobody to protect, a refusal only turns a late answer into none (a busy box's
first request measured 0.65 against 0.40 and was refused while the daemon sat
idle).  That stream may run late; the next newcomer is judged with it counted.

``retry_after_ms`` is when the first admitted stream is expected to stop
producing audio, i.e. when its share of the workers comes free.

The compute the streams report is the workers' wall time per item, which
contention inflates: with both workers busy, each one's intra-op threads share
the cores, and every item seems to cost twice what it does.  Given the
scheduler's busy time (:class:`CpuShare`), the estimate is converted to CPU
time: the daemon's CPU seconds per second of worker busy time, measured over
the last few seconds of work, times the wall estimate.  The finished requests'
estimate is kept in CPU time (each converted as it ends), as the warm-up measures
it: converting it again would shrink it by the factor (beside a CPU hog, ~0.6: the
first wave of streams was admitted at 0.043 CPU s per audio second when they cost
0.07).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from appliance.ops.config import SchedulerConfig

# Before a stream has produced this much audio its compute/audio ratio is
# dominated by the first encode and says little about its steady demand.
_MIN_AUDIO_FOR_RTF_S = 2.0
RTF_PRIOR = 0.15
"""CPU seconds per second of audio assumed before anything was measured."""
_RETRY_MIN_MS = 200
_RETRY_MAX_MS = 30_000


def process_cpu_s() -> float:
    """User + system CPU seconds of this process, all threads."""
    t = os.times()
    return t.user + t.system


class CpuShare:
    """The daemon's CPU seconds per second of worker busy (wall) time.

    Updated once at least ``min_busy_s`` of new busy time has passed since the last
    reading (shorter spans say little: CPU times tick in 10 ms); 1.0 until then.
    Clamped to [0.1, 4]: a factor outside that range is a measuring accident.
    """

    def __init__(
        self,
        busy_s: Callable[[], float],
        cpu_s: Callable[[], float] = process_cpu_s,
        min_busy_s: float = 2.0,
        smoothing: float = 0.5,
    ) -> None:
        self._busy_s = busy_s
        self._cpu_s = cpu_s
        self._min_busy_s = min_busy_s
        self._smoothing = smoothing
        self._last = (busy_s(), cpu_s())
        self._factor = 1.0
        self._measured = False

    def factor(self) -> float:
        busy, cpu = self._busy_s(), self._cpu_s()
        d_busy, d_cpu = busy - self._last[0], cpu - self._last[1]
        if d_busy >= self._min_busy_s:
            ratio = min(4.0, max(0.1, d_cpu / d_busy))
            if self._measured:
                ratio = self._factor + self._smoothing * (ratio - self._factor)
            self._factor, self._measured = ratio, True
            self._last = (busy, cpu)
        return self._factor


@dataclass(frozen=True)
class StreamLoad:
    """What admission needs to know about one live request."""

    realtime: bool
    producing: bool
    """Still has audio to produce (false once its last chunk was written)."""
    compute_s: float = 0.0
    audio_s: float = 0.0
    remaining_audio_s: float | None = None
    """Estimate of the audio still to come; None before the first clause was encoded."""


@dataclass(frozen=True)
class Pressure:
    """What admission weighs of the scheduler: how late its real-time work runs, in
    seconds, on average over ``admission_window_s`` (``mean_s``) and the most urgent item
    queued now (``overdue_s``); and the share of its threads' runnable time spent waiting
    for a CPU (``cpu_wait``, None when it cannot be read)."""

    mean_s: float = 0.0
    overdue_s: float = 0.0
    cpu_wait: float | None = None

    @property
    def behind_s(self) -> float:
        return max(self.mean_s, self.overdue_s)


QUIET = Pressure()
"""No real-time work late, no wait read (what a daemon with nothing queued reports)."""


@dataclass(frozen=True)
class Decision:
    admit: bool
    retry_after_ms: int = 0
    reason: str = ""
    load: float = 0.0
    limit: float = 0.0
    """The projection's limit it was judged against (``admission_max_load``, shrunk
    beside other work)."""


def load_limit(cfg: SchedulerConfig, pressure: Pressure) -> float:
    """``admission_max_load``, shrunk by the run-queue wait beyond ``admission_cpu_wait``
    (see the module)."""
    wait, free = pressure.cpu_wait, cfg.admission_cpu_wait
    if wait is None or wait <= free or free >= 1.0:
        return cfg.admission_max_load
    return cfg.admission_max_load * (1.0 - min(wait, 1.0)) / (1.0 - free)


class Admission:
    """Decides on new real-time requests; keeps the measured real-time factor."""

    def __init__(
        self,
        workers: float,
        rtf_prior: float = RTF_PRIOR,
        smoothing: float = 0.2,
        cpu_share: CpuShare | None = None,
    ) -> None:
        self.workers = workers if workers > 0 else 1.0
        """The workers' worth of CPU the streams share (fewer than the workers under a CPU
        quota: the scheduler's ``capacity``)."""
        self._cpu_share = cpu_share
        self._rtf_done = rtf_prior
        self._smoothing = smoothing
        self._observed = 0
        self.admitted = 0
        self.rejected = 0
        self.last: Decision | None = None

    def measured_at_start(self, rtf: float) -> None:
        """The cost the start-up warm-up measured, when it comes after this was made (the
        daemon answers before its warm-up ends): it replaces the prior until requests are
        observed."""
        if self._observed == 0 and rtf > 0:
            self._rtf_done = rtf

    def observe(self, compute_s: float, audio_s: float) -> None:
        """A finished request's totals, worker wall time (ignored when too short to say
        anything); kept converted to CPU time."""
        if audio_s < _MIN_AUDIO_FOR_RTF_S or compute_s <= 0:
            return
        rtf = compute_s * self._cpu_factor() / audio_s
        self._rtf_done += self._smoothing * (rtf - self._rtf_done)
        self._observed += 1

    def rtf(self, streams: Iterable[StreamLoad]) -> float:
        """CPU seconds per second of audio: live streams pooled with finished ones."""
        compute = audio = 0.0
        for s in streams:
            if s.realtime and s.audio_s >= _MIN_AUDIO_FOR_RTF_S:
                compute += s.compute_s
                audio += s.audio_s
        if audio <= 0:
            return self._rtf_done
        # The finished-request estimate counts as a few seconds of audio so one
        # odd live stream cannot swing it alone.
        prior_weight = 10.0 if self._observed else 2.0
        cpu = compute * self._cpu_factor()
        return (cpu + self._rtf_done * prior_weight) / (audio + prior_weight)

    def _cpu_factor(self) -> float:
        """CPU seconds per second of worker wall time (1 without a :class:`CpuShare`)."""
        return self._cpu_share.factor() if self._cpu_share is not None else 1.0

    def projected_load(self, streams: list[StreamLoad]) -> float:
        """Share of the workers the producing real-time streams plus one more would claim."""
        rtf = self.rtf(streams)
        return (producing(streams) + 1) * rtf / self.workers

    def decide(
        self, cfg: SchedulerConfig, streams: list[StreamLoad], pressure: Pressure
    ) -> Decision:
        d = self.judge(cfg, streams, pressure)
        if d.admit:
            self.admitted += 1
        else:
            self.rejected += 1
        self.last = d
        return d

    def judge(
        self, cfg: SchedulerConfig, streams: list[StreamLoad], pressure: Pressure
    ) -> Decision:
        """The decision :meth:`decide` would take now, counting nothing (a balancer's
        check asks it: appliance.core.capacity)."""
        load = self.projected_load(streams)
        limit = load_limit(cfg, pressure)
        backlog_s = cfg.admission_backlog_ms / 1000.0
        behind = backlog_s > 0 and pressure.behind_s > backlog_s
        if producing(streams) == 0:
            d = Decision(True, load=load, limit=limit)  # alone: nobody a refusal would protect
        elif load > limit:
            d = Decision(
                False,
                self._retry_after_ms(streams),
                f"projected load {load:.2f} exceeds {limit:.2f}{_shrunk(cfg, pressure, limit)}",
                load,
                limit,
            )
        elif behind:
            d = Decision(
                False,
                _clamp_ms(pressure.behind_s * 1000.0),
                f"real-time work is {pressure.behind_s * 1000:.0f} ms behind",
                load,
                limit,
            )
        else:
            d = Decision(True, load=load, limit=limit)
        return d

    @staticmethod
    def _retry_after_ms(streams: list[StreamLoad]) -> int:
        remaining = [
            s.remaining_audio_s
            for s in streams
            if s.realtime and s.producing and s.remaining_audio_s is not None
        ]
        return _clamp_ms(min(remaining) * 1000.0 if remaining else 1000.0)

    def snapshot(self, streams: list[StreamLoad], limit: float) -> dict[str, Any]:
        """``limit``: the projection's limit now (:func:`load_limit`)."""
        rtf = self.rtf(streams)
        return {
            "rtf_estimate": round(rtf, 4),
            "capacity": round(self.workers, 3),
            "load": round(producing(streams) * rtf / self.workers, 3),
            "limit": round(limit, 3),
            "admitted": self.admitted,
            "busy_rejections": self.rejected,
            "last_reason": self.last.reason if self.last is not None else "",
        }


def _shrunk(cfg: SchedulerConfig, pressure: Pressure, limit: float) -> str:
    """What a refusal's reason adds when the limit was shrunk beside other work."""
    if limit >= cfg.admission_max_load or pressure.cpu_wait is None:
        return ""
    return f" ({cfg.admission_max_load:.2f} with the CPU wait at {pressure.cpu_wait:.2f})"


def producing(streams: Iterable[StreamLoad]) -> int:
    """The real-time streams with audio still to produce: each claims its share."""
    return sum(1 for s in streams if s.realtime and s.producing)


def _clamp_ms(ms: float) -> int:
    return int(min(_RETRY_MAX_MS, max(_RETRY_MIN_MS, ms)))
