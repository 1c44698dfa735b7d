"""``engine.keep_warm_s`` (appliance.keepwarm): on the real daemon, after a request its
voice runs while the daemon is quiet, for ``keep_warm_s`` and no longer; a request in the
meantime is served as ever; a stop meanwhile is clean; off by default, a quiet daemon runs
nothing.  In process, on a runtime without voices: nothing runs before the idle warm-up
is done (the daemon's tests start after it)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from appliance.core import warmup
from appliance.core.runtime import Runtime
from appliance.core.scheduler import Scheduler
from appliance.core.service import Service, Stream
from appliance.keepwarm import KeepWarm
from appliance.ops.config import parse_config
from appliance.ops.metrics import Metrics
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire

KEEP_S = 4.0


def _prior_runs(d: Daemon) -> int:
    """The prior's runs so far: a touch runs it once, a one-sentence request once."""
    with Wire(d.socket) as w:
        runs = w.call({"op": "stats", "id": 1})["model_runs"]
    return int(runs.get("prior", {}).get("runs", 0))


def _speak(d: Daemon, text: str) -> dict[str, object]:
    with Wire(d.socket) as w:
        return w.call({"op": "synthesize", "id": 2, "text": text})


def test_a_voice_is_kept_warm_for_keep_warm_s_after_its_request(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory({"engine": {"keep_warm_s": KEEP_S}})
    quiet = _prior_runs(d)
    time.sleep(0.6)
    assert _prior_runs(d) == quiet  # no request yet: nothing to keep warm
    assert _speak(d, "Turn left.")["event"] == "end"
    first = _prior_runs(d)
    time.sleep(3.2)
    # Every second while quiet (KEEP_WARM_EVERY_S): 3 by now; a busy box's loop may run late.
    assert _prior_runs(d) >= first + 2
    # A request while it is kept warm is served as ever, and keeps it warm longer.
    assert _speak(d, "Then right.")["event"] == "end"
    ended = time.monotonic()
    time.sleep(max(0.0, ended + KEEP_S + 0.5 - time.monotonic()))
    settled = _prior_runs(d)
    time.sleep(1.3)
    assert _prior_runs(d) == settled  # past keep_warm_s: it stopped
    # Stopped while it keeps a voice warm: at once, cleanly.
    assert _speak(d, "Turn left.")["event"] == "end"
    time.sleep(0.5)
    t0 = time.monotonic()
    assert d.stop(timeout=15) == 0
    assert time.monotonic() - t0 < 10
    assert "Traceback" not in d.log()


def test_off_by_default_a_quiet_daemon_runs_nothing(daemon: Daemon) -> None:
    assert _speak(daemon, "Turn left.")["event"] == "end"
    after = _prior_runs(daemon)
    time.sleep(0.8)
    assert _prior_runs(daemon) == after


def test_nothing_is_kept_warm_until_the_idle_warm_up_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warm-up's later steps measure the CPU they take (admission's stream cost): a
    touch between two of them would count in it, so none runs until it is done."""
    touched: list[object] = []
    monkeypatch.setattr(warmup, "keep_warm_touch", touched.append)
    cfg = parse_config({"engine": {"workers": 1, "keep_warm_s": 30.0}})
    voice = object()  # what the touch gets: only handed over here
    runtime = Runtime(cfg, {"joe": cast(Any, voice)}, "joe", Scheduler(1, name="kw"), Metrics())
    service = Service(runtime)
    tasks: list[asyncio.Task[Any]] = []

    async def scenario() -> None:
        kw = KeepWarm(lambda: service, tasks.append, every_s=0.02)
        kw.on_request_done(cast(Stream, SimpleNamespace(voice_name="joe")))
        await asyncio.sleep(0.3)
        assert touched == []  # ~15 periods, the warm-up still running
        runtime.warm.done = True
        deadline = time.monotonic() + 10
        while len(touched) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        tasks[0].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    runtime.scheduler.start()
    try:
        asyncio.run(scenario())
    finally:
        runtime.scheduler.stop()
    assert touched[:2] == [voice, voice]
