"""Admission's cost estimate: wall time per stream, converted to CPU time when it can be."""

from __future__ import annotations

import time

from appliance.clients.client import Client
from appliance.core.admission import (
    QUIET,
    Admission,
    CpuShare,
    Pressure,
    StreamLoad,
    load_limit,
    process_cpu_s,
)
from appliance.ops.config import SchedulerConfig
from tests.conftest import DaemonFactory


class Clocks:
    def __init__(self) -> None:
        self.busy = 0.0
        self.cpu = 0.0

    def share(self) -> CpuShare:
        return CpuShare(lambda: self.busy, lambda: self.cpu, min_busy_s=2.0, smoothing=0.5)


def streams(n: int, wall_rtf: float) -> list[StreamLoad]:
    # Each has produced 10 s of audio at ``wall_rtf`` worker-seconds per audio second.
    return [StreamLoad(True, True, compute_s=10.0 * wall_rtf, audio_s=10.0) for _ in range(n)]


def test_cpu_share_is_one_until_enough_busy_time_then_cpu_per_busy_second() -> None:
    c = Clocks()
    share = c.share()
    c.busy, c.cpu = 1.0, 0.2
    assert share.factor() == 1.0  # 1 s of busy time says too little
    c.busy, c.cpu = 4.0, 2.0
    assert share.factor() == 0.5
    c.busy, c.cpu = 8.0, 2.0 + 4.0 * 1.5
    assert share.factor() == 0.5 + 0.5 * (1.5 - 0.5)  # smoothed
    c.busy, c.cpu = 100.0, 1000.0
    assert share.factor() <= 4.0  # clamped


def test_the_process_cpu_clock_counts_work() -> None:
    t0 = process_cpu_s()
    sum(i * i for i in range(2_000_000))
    assert process_cpu_s() > t0


def test_wall_time_inflated_by_contention_no_longer_refuses_streams() -> None:
    cfg = SchedulerConfig(admission_max_load=0.4, admission_backlog_ms=0)
    live = streams(3, wall_rtf=0.25)
    # Wall time only: (3 + 1) * 0.25 / 2 workers = 0.5 > 0.4, refused.
    assert not Admission(2, rtf_prior=0.25).decide(cfg, live, QUIET).admit
    # The workers were busy 10 s while the daemon used 5 CPU seconds: each stream
    # costs half what its wall time says, and the fourth fits.
    # The prior is CPU time already: 0.125, what the streams cost in CPU time.
    c = Clocks()
    admission = Admission(2, rtf_prior=0.125, cpu_share=c.share())
    c.busy, c.cpu = 10.0, 5.0
    d = admission.decide(cfg, live, QUIET)
    assert d.admit and abs(d.load - 0.25) < 1e-3


def test_the_finished_requests_estimate_is_cpu_time_and_converted_once() -> None:
    c = Clocks()
    admission = Admission(2, rtf_prior=0.15, cpu_share=c.share())
    admission.measured_at_start(0.07)  # the warm-up's CPU seconds per audio second
    c.busy, c.cpu = 10.0, 6.0  # the workers' wall time is inflated: 0.6 CPU s per busy s
    # Nothing live: the warm-up's figure as it is, not 0.07 × 0.6 (the first wave beside
    # a CPU hog was admitted at 0.043 when streams cost 0.07).
    assert admission.rtf([]) == 0.07
    # A finished request's wall time is converted as it ends: 10 s for 100 s of audio
    # at 0.6 is 0.06, and the estimate moves a fifth of the way to it.
    admission.observe(10.0, 100.0)
    assert abs(admission.rtf([]) - (0.07 + 0.2 * (0.06 - 0.07))) < 1e-12
    # Live streams' wall time is converted; the finished estimate is not converted again.
    live = streams(2, wall_rtf=0.1)  # 2 s of wall time, 1.2 CPU s, for 20 s of audio
    expected = (2.0 * 0.6 + admission.rtf([]) * 10.0) / (20.0 + 10.0)
    assert abs(admission.rtf(live) - expected) < 1e-12


def test_without_a_cpu_share_the_estimate_is_unchanged() -> None:
    live = streams(2, wall_rtf=0.2)
    assert (
        abs(Admission(2, rtf_prior=0.25).rtf(live) - (2.0 * 2 + 0.25 * 2.0) / (20.0 + 2.0)) < 1e-9
    )


def test_a_stream_alone_is_admitted_however_slow_the_box_and_the_next_is_judged() -> None:
    cfg = SchedulerConfig(admission_max_load=0.4, admission_backlog_ms=1000)
    slow = Admission(2, rtf_prior=1.3)  # each stream would claim 0.65 of the workers
    # Nothing producing: neither the projection nor a stale backlog refuses.
    assert slow.decide(cfg, [], Pressure(mean_s=5.0, overdue_s=5.0)).admit
    finished = [StreamLoad(True, False, compute_s=13.0, audio_s=10.0)]
    assert slow.decide(cfg, finished, Pressure(5.0, 5.0)).admit
    batch = [StreamLoad(False, True, compute_s=13.0, audio_s=10.0)]
    assert slow.decide(cfg, batch, QUIET).admit
    # One producing: the newcomer is judged by both rules.
    live = [StreamLoad(True, True, compute_s=13.0, audio_s=10.0)]
    refused = slow.decide(cfg, live, QUIET)
    assert not refused.admit and "projected load" in refused.reason
    roomy = SchedulerConfig(admission_max_load=8.0, admission_backlog_ms=1000)
    behind = slow.decide(roomy, live, Pressure(2.0, 0.0))
    assert not behind.admit and "behind" in behind.reason


def test_beside_other_work_the_limit_shrinks_with_the_cpu_the_threads_get() -> None:
    cfg = SchedulerConfig(admission_max_load=0.4, admission_cpu_wait=0.3)
    # No reading, or a wait the daemon's own threads make on a quiet box: the limit holds.
    for wait in (None, 0.0, 0.2, 0.3):
        assert load_limit(cfg, Pressure(cpu_wait=wait)) == 0.4
    # Beyond it, in proportion to the share of their runnable time the threads run.
    assert abs(load_limit(cfg, Pressure(cpu_wait=0.65)) - 0.4 * 0.35 / 0.7) < 1e-9
    assert load_limit(cfg, Pressure(cpu_wait=1.0)) == 0.0
    # 1 turns it off.
    off = SchedulerConfig(admission_max_load=0.4, admission_cpu_wait=1.0)
    assert load_limit(off, Pressure(cpu_wait=0.9)) == 0.4


def test_a_newcomer_a_quiet_box_takes_is_refused_beside_a_cpu_hog_and_told_why() -> None:
    cfg = SchedulerConfig(admission_max_load=0.4, admission_backlog_ms=0)
    admission = Admission(2, rtf_prior=0.1)
    live = streams(3, wall_rtf=0.1)  # (3 + 1) × 0.1 / 2 workers = 0.2
    quiet = admission.judge(cfg, live, Pressure(cpu_wait=0.15))
    assert quiet.admit and quiet.limit == 0.4
    hog = admission.judge(cfg, live, Pressure(cpu_wait=0.72))  # the limit: 0.16
    assert not hog.admit and abs(hog.limit - 0.16) < 1e-9
    assert hog.reason == "projected load 0.20 exceeds 0.16 (0.40 with the CPU wait at 0.72)"
    assert hog.retry_after_ms > 0
    # Fewer streams still fit, and a stream alone is admitted whatever the wait.
    assert admission.judge(cfg, live[:1], Pressure(cpu_wait=0.72)).admit
    assert admission.judge(cfg, [], Pressure(cpu_wait=0.99)).admit
    # What stats report: the limit now.
    assert admission.snapshot(live, hog.limit)["limit"] == 0.16


def test_the_real_daemon_shrinks_its_limit_by_the_wait_its_workers_read(
    daemon_factory: DaemonFactory,
) -> None:
    # admission_cpu_wait 0: any wait shrinks the limit, so what the limit says shows the
    # daemon's whole path (the workers' schedstat reads, the service's pressure, stats).
    d = daemon_factory({"scheduler": {"admission_max_load": 8.0, "admission_cpu_wait": 0.0}})
    text = "The ferry leaves at seven, and the last bus back is at half past ten tonight."
    deadline = time.monotonic() + 60
    with Client(d.socket) as c:
        while True:
            c.synthesize_all(text)
            # The workers read the wait just after an item; nothing runs once it is read.
            time.sleep(0.3)
            st = c.stats()
            if st["scheduler"]["cpu_wait"] is not None:
                break
            assert time.monotonic() < deadline, st["scheduler"]
    wait, limit = st["scheduler"]["cpu_wait"], st["admission"]["limit"]
    assert 0.0 <= wait <= 1.0
    # The wait is rounded to 3 places and the limit too: 8 × 0.0005 + 0.0005 apart at most.
    assert abs(limit - 8.0 * (1.0 - wait)) <= 0.0045, (wait, limit)


def test_the_snapshot_reports_the_load_of_the_producing_streams_at_one_estimate() -> None:
    admission = Admission(2, rtf_prior=0.1)
    live = [*streams(3, wall_rtf=0.1), StreamLoad(True, False), StreamLoad(False, True)]
    snap = admission.snapshot(live, 0.4)
    # Three real-time streams still producing at 0.1 each, on two workers; the finished
    # one and the batch one claim nothing. (The projection adds the stream asked for.)
    assert snap["rtf_estimate"] == 0.1
    assert snap["load"] == 0.15
    assert admission.projected_load(live) == 4 * 0.1 / 2
    assert snap["limit"] == 0.4


def test_under_a_cpu_quota_the_projection_counts_the_quota_not_the_workers() -> None:
    """Two workers in a cgroup of one CPU (appliance.ops.cpuquota) take turns: the streams
    share one CPU's worth, and admission's projection counts that (stats says
    ``admission.capacity``)."""
    from appliance.core.scheduler import Scheduler

    cfg = SchedulerConfig(admission_max_load=0.4, admission_backlog_ms=0)
    live = streams(5, wall_rtf=0.07)  # (5 + 1) × 0.07 = 0.42 CPU
    assert Scheduler(2).capacity == 2.0 and Scheduler(2, quota=3.0).capacity == 2.0
    on_two = Admission(Scheduler(2).capacity, rtf_prior=0.07)
    assert on_two.decide(cfg, live, QUIET).admit  # 0.21 of two workers
    one = Scheduler(2, quota=1.0)
    under_quota = Admission(one.capacity, rtf_prior=0.07)
    d = under_quota.decide(cfg, live, QUIET)
    assert not d.admit and abs(d.load - 0.42) < 1e-3  # 0.42 of one CPU
    assert under_quota.snapshot(live, 0.4)["capacity"] == 1.0
    assert one.snapshot()["cpu_quota"] == 1.0
