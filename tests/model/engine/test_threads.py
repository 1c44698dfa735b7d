"""How many ONNX Runtime threads a worker uses, and whether they spin (engine/threads.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from appliance.model.engine.threads import (
    CpuPlan,
    Pinning,
    cpu_plan,
    cpu_threads,
    pinning,
    spin_wait,
)
from appliance.ops import cpuquota
from appliance.ops.config import parse_config


def _cpus(monkeypatch: pytest.MonkeyPatch, n: int | set[int], quota: float | None = None) -> None:
    """The CPUs this process may use, and its cgroup's CPU quota (none by default, whatever
    the box running the tests has)."""
    cpus = set(range(n)) if isinstance(n, int) else n
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(cpus))
    monkeypatch.setattr(cpuquota, "cpu_quota", lambda root=None: quota)


@pytest.mark.parametrize(
    ("cpus", "workers", "threads", "mode", "spins"),
    [
        (2, 1, 2, "auto", False),  # the threads would fill every CPU: nothing left for the loop
        (2, 2, 2, "auto", False),
        (4, 1, 2, "auto", True),  # two CPUs stay free
        (4, 2, 2, "auto", False),
        (8, 2, 3, "auto", True),
        (4, 1, 1, "auto", False),  # one thread has nobody to wait for
        (2, 2, 2, "on", True),
        (16, 1, 2, "off", False),
    ],
)
def test_auto_spins_only_when_a_cpu_stays_free(
    monkeypatch: pytest.MonkeyPatch, cpus: int, workers: int, threads: int, mode: str, spins: bool
) -> None:
    _cpus(monkeypatch, cpus)
    cfg = parse_config({"engine": {"workers": workers, "spin_wait": mode}})
    assert spin_wait(cfg, threads) is spins


@pytest.mark.parametrize(
    ("cpus", "workers", "threads"),
    [
        (2, 2, 1),  # this box: one each, no pool threads to share a worker's core
        (3, 2, 1),
        (4, 2, 2),
        (8, 2, 4),
        (8, 3, 2),
        (2, 1, 2),
        (1, 2, 1),  # more workers than CPUs: still one each
    ],
)
def test_default_threads_share_the_cpus_between_the_workers(
    monkeypatch: pytest.MonkeyPatch, cpus: int, workers: int, threads: int
) -> None:
    _cpus(monkeypatch, cpus)
    cfg = parse_config({"engine": {"workers": workers}})
    assert cpu_threads(cfg) == threads
    told = parse_config({"engine": {"workers": workers, "intra_op_threads": 3}})
    assert cpu_threads(told) == 3  # as told


@pytest.mark.parametrize(("quota", "threads"), [(1.0, 1), (1.5, 2), (0.5, 1), (8.0, 4)])
def test_under_a_cpu_quota_no_more_threads_than_it_feeds(
    monkeypatch: pytest.MonkeyPatch, quota: float, threads: int
) -> None:
    """One worker on four CPUs: its threads are the quota rounded up."""
    _cpus(monkeypatch, 4, quota)
    assert cpu_threads(parse_config({"engine": {"workers": 1}})) == threads
    assert cpu_threads(parse_config({"engine": {"workers": 2}})) == max(1, threads // 2)


def test_under_a_cpu_quota_threads_spin_only_with_quota_to_spare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four CPUs, one worker of two threads: spinning leaves two CPUs free, but not under a
    2-CPU quota, where each spin spends what the next run needs."""
    cfg = parse_config({"engine": {"workers": 1}})
    _cpus(monkeypatch, 4)
    assert spin_wait(cfg, 2) is True
    _cpus(monkeypatch, 4, 2.0)
    assert spin_wait(cfg, 2) is False
    _cpus(monkeypatch, 4, 3.0)
    assert spin_wait(cfg, 2) is True


def test_a_plan_is_made_from_the_one_quota_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start reads the quota once, and every voice's sessions and the workers are sized
    from that read (each voice's load read it again before)."""
    _cpus(monkeypatch, 4)

    def read_again(root: Any = None) -> float | None:
        raise AssertionError("the plan read the quota itself")

    monkeypatch.setattr(cpuquota, "cpu_quota", read_again)
    cfg = parse_config({"engine": {"workers": 1}})
    assert cpu_plan(cfg, 1.5) == CpuPlan(1.5, 2, False, pinning(cfg, 2))
    assert cpu_plan(cfg, None) == CpuPlan(None, 4, False, pinning(cfg, 4))
    assert cpu_plan(cfg, 3.0, pin=False) == CpuPlan(3.0, 3, False, None)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_daemon_s_sessions_have_the_threads_of_their_share_and_do_not_spin(
    monkeypatch: pytest.MonkeyPatch, voice_cache: Path, workers: int
) -> None:
    """On the model the daemon builds (`Runtime.load`) on 2 CPUs: one worker's sessions
    take both and must not spin (nothing would be left for the loop); two workers' take
    one each, and the 1-D decoder, which only pays on more than one thread, is not loaded."""
    from appliance.core.runtime import Runtime
    from appliance.model.engine.onnx import OnnxVoiceModel

    _cpus(monkeypatch, 2)
    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"workers": workers, "backend": "onnx-cpu"},
        }
    )
    rt = Runtime.load(cfg)
    try:
        model = rt.voices[rt.default_voice].model
        assert isinstance(model, OnnxVoiceModel)
        sessions = [model._decoder, model._prior, model._flow, model._encoder, model._lean]
        loaded = [s for s in sessions if s is not None]
        assert (model._decoder is None) is (workers == 2)
        threads = {s.get_session_options().intra_op_num_threads for s in loaded}
        assert threads == {2 // workers, 1}  # the 2-D decoder has one thread in both
        for session in loaded:
            opts = session.get_session_options()
            assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    finally:
        rt.close()


@pytest.mark.parametrize(
    ("cpus", "workers", "threads", "mode", "expected"),
    [
        (2, 2, 2, "auto", Pinning(workers=(0, 1), pool=(1,))),
        (2, 1, 2, "auto", Pinning(workers=(0,), pool=(1,))),
        (4, 2, 4, "auto", Pinning(workers=(0, 1), pool=(3, 2, 1))),
        ({3, 5, 9}, 2, 2, "auto", Pinning(workers=(3, 5), pool=(9,))),  # only CPUs we may use
        (2, 2, 1, "auto", None),  # one thread: no pool threads, nothing to keep apart
        (2, 3, 2, "auto", None),  # more workers than CPUs
        (2, 2, 3, "auto", None),  # more threads than CPUs
        (1, 1, 1, "auto", None),
        (2, 2, 2, "off", None),
    ],
)
def test_workers_first_pool_threads_last(
    monkeypatch: pytest.MonkeyPatch,
    cpus: int | set[int],
    workers: int,
    threads: int,
    mode: str,
    expected: Pinning | None,
) -> None:
    _cpus(monkeypatch, cpus)
    cfg = parse_config({"engine": {"workers": workers, "pin_threads": mode}})
    assert pinning(cfg, threads) == expected


def _single_cpu_threads() -> dict[str, set[int]]:
    """This process's threads that may run on one CPU only, by thread id."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        cpus = os.sched_getaffinity(int(tid))
        if len(cpus) == 1:
            out[tid] = cpus
    return out


def _affinities(session: Any) -> str | None:
    try:
        entry: str = session.get_session_options().get_session_config_entry(
            "session.intra_op_thread_affinities"
        )
    except RuntimeError:  # onnxruntime's answer for an entry never set
        return None
    return entry


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_the_daemon_s_workers_and_pool_threads_run_where_the_plan_says(
    voice_cache: Path, mode: str
) -> None:
    """On what `Runtime.load` builds, with this machine's real CPUs and one worker (whose
    sessions then have a thread per CPU): the sessions carry the pool threads' CPUs, ONNX
    Runtime's pool threads are pinned there, and the worker runs items on its own CPU;
    with ``off``, nothing is pinned."""
    from appliance.core.runtime import Runtime
    from appliance.model.engine.onnx import OnnxVoiceModel

    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"backend": "onnx-cpu", "pin_threads": mode, "workers": 1},
        }
    )
    plan = pinning(cfg, cpu_threads(cfg))
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "auto" and len(cpus) >= 2:  # on any box of 2 CPUs or more
        assert plan == Pinning(workers=(cpus[0],), pool=tuple(cpus[:0:-1]))
    before = _single_cpu_threads()
    rt = Runtime.load(cfg)
    try:
        workers = {str(t.native_id) for t in rt.scheduler._threads}
        pinned_now = {t: c for t, c in _single_cpu_threads().items() if t not in before}
        # ONNX Runtime's pool threads only.
        pool_now = {t: c for t, c in pinned_now.items() if t not in workers}
        model = rt.voices[rt.default_voice].model
        assert isinstance(model, OnnxVoiceModel)
        parallel = [s for s in (model._decoder, model._prior, model._flow) if s is not None]
        entries = {_affinities(s) for s in parallel}

        async def where() -> list[set[int]]:
            loop_items = [
                rt.scheduler.submit(
                    lambda: os.sched_getaffinity(0),
                    deadline=0.0,
                    realtime=True,
                    owner=k,
                    kind="t",
                )
                for k in range(rt.scheduler.workers)
            ]
            return [r for r, _timing in await asyncio.gather(*loop_items)]

        seen = asyncio.run(where())
    finally:
        rt.close()
    if plan is None:
        assert entries == {None}
        assert not pinned_now
        assert all(c == set(cpus) for c in seen)
        return
    assert entries == {";".join(str(c + 1) for c in plan.pool)}
    pool_threads = [c for c in pool_now.values() if c <= set(plan.pool)]
    assert len(pool_threads) >= len(parallel) * len(plan.pool)
    assert all(len(c) == 1 and c <= set(plan.workers) for c in seen)


@pytest.mark.parametrize(
    ("workers", "cpus", "quota", "threads", "own"),
    [
        (2, 2, None, None, True),  # the default on 2 CPUs: a thread each, a core each
        (2, 4, None, None, False),  # two threads each: a session's pool shares cores
        (2, 2, 1.5, None, False),  # two workers on a quota of 1.5 CPUs share them
        (3, 2, None, 1, False),  # more workers than CPUs
        (1, 1, None, None, True),
    ],
)
def test_workers_have_cores_of_their_own_only_with_a_thread_each_and_a_cpu_each(
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    cpus: int,
    quota: float | None,
    threads: int | None,
    own: bool,
) -> None:
    """What lets the scheduler run a lone request's next encode beside its first item."""
    _cpus(monkeypatch, cpus, quota)
    engine: dict[str, Any] = {"workers": workers}
    if threads is not None:
        engine["intra_op_threads"] = threads
    assert cpu_plan(parse_config({"engine": engine}), quota).own_cores is own
