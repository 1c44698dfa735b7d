"""The concurrency bench's CPU hogs (bench.concurrency.CpuHogs): real busy processes for
the length of a block, none left behind."""

from __future__ import annotations

import time

import psutil

from bench.concurrency import CpuHogs, format_model_cpu, model_cpu_per_audio_s


def test_hogs_burn_cpu_inside_the_block_and_are_gone_after_it() -> None:
    me = psutil.Process()
    with CpuHogs(2):
        hogs = [c for c in me.children() if c.name() == "yes"]
        assert len(hogs) == 2
        before = [sum(h.cpu_times()[:2]) for h in hogs]
        time.sleep(0.5)
        burnt = [sum(h.cpu_times()[:2]) - b for h, b in zip(hogs, before, strict=True)]
        assert all(b > 0.05 for b in burnt), burnt  # each ran, even on a busy box
    assert not [c for c in me.children() if c.name() == "yes"]
    assert not any(h.is_running() and h.status() != psutil.STATUS_ZOMBIE for h in hogs)


def test_model_cpu_is_per_second_of_audio_produced_between_two_reads() -> None:
    before = {
        "counters": {"audio_ms": 1000},
        "model_runs": {"decoder": {"cpu_s": 1.0}, "prior": {"cpu_s": 0.5}},
    }
    after = {
        "counters": {"audio_ms": 11000},
        "model_runs": {
            "decoder": {"cpu_s": 1.4},
            "prior": {"cpu_s": 0.6},
            "flow": {"cpu_s": 0.05},  # a part first run between the two reads
            "keep_warm": {"cpu_s": 0.2},  # the daemon's own: not a stream's cost
        },
    }
    cpu = model_cpu_per_audio_s(before, after)
    assert cpu.pop("keep_warm") == 0.02
    assert cpu == {"decoder": 0.04, "prior": 0.01, "flow": 0.005, "model": 0.055}
    assert model_cpu_per_audio_s(after, after) == {}  # no audio: no figure
    table = format_model_cpu([{"streams": 8, "model_cpu_per_audio_s": cpu}, {"streams": 16}])
    head, eight, sixteen = table.splitlines()
    assert head.split() == ["streams", "decoder", "flow", "prior", "model"]
    assert eight.split() == ["8", "0.0400", "0.0050", "0.0100", "0.0550"]
    assert sixteen.split() == ["16", "-", "-", "-", "-"]  # a level without the figure
