"""What a balancer reads (appliance.core.capacity): the agent-check line of each state and
a judgement that counts nothing."""

from __future__ import annotations

from appliance.core.admission import QUIET, Admission, StreamLoad
from appliance.core.capacity import Capacity
from appliance.ops.config import SchedulerConfig


def test_agent_lines() -> None:
    assert Capacity("ready", 57, 6).agent_line() == "up ready 57% maxconn:6\n"
    assert Capacity("drain", reason="busy: projected load").agent_line() == "up drain\n"
    # A reason HAProxy shows: one printable word, never a second line.
    assert (
        Capacity("down", reason="workers\nstalled now").agent_line() == "down#workers_stalled_now\n"
    )


def test_judging_counts_nothing() -> None:
    adm = Admission(workers=2, rtf_prior=0.2)
    cfg = SchedulerConfig(admission_max_load=0.4)
    live = [StreamLoad(realtime=True, producing=True) for _ in range(4)]
    d = adm.judge(cfg, live, QUIET)
    assert not d.admit  # (4 + 1) × 0.2 / 2 workers = 0.5 > 0.4
    assert adm.admitted == 0 and adm.rejected == 0 and adm.last is None
    assert adm.decide(cfg, live, QUIET) == d and adm.rejected + adm.admitted == 1
