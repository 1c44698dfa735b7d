"""How many ONNX Runtime threads a worker uses, and whether they spin (engine/threads.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.config import parse_config
from appliance.engine.threads import cpu_threads, spin_wait


def _cpus(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(n)))


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


def test_default_threads_are_the_cpus_we_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpus(monkeypatch, 3)
    assert cpu_threads(parse_config({})) == 3
    assert cpu_threads(parse_config({"engine": {"intra_op_threads": 1}})) == 1


def test_one_worker_on_this_box_builds_sessions_that_do_not_spin(
    monkeypatch: pytest.MonkeyPatch, voice_cache: Path
) -> None:
    """On the model the daemon builds (`Runtime.load`): one worker whose threads take
    every CPU must not spin."""
    from appliance.engine.onnx import OnnxVoiceModel
    from appliance.runtime import Runtime

    _cpus(monkeypatch, 2)
    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"workers": 1, "backend": "onnx-cpu"},
        }
    )
    rt = Runtime.load(cfg)
    try:
        model = rt.voices[rt.default_voice].model
        assert isinstance(model, OnnxVoiceModel)
        sessions = [model._decoder, model._prior, model._flow, model._encoder]
        for session in filter(None, sessions):
            opts = session.get_session_options()
            assert opts.intra_op_num_threads == 2
            assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    finally:
        rt.close()
