"""``engine.keep_warm_s`` (appliance.keepwarm): on the real daemon, after a request its
voice runs while the daemon is quiet, for ``keep_warm_s`` and no longer; a request in the
meantime is served as ever; a stop meanwhile is clean; on by default; at 0 a quiet daemon
runs nothing (the suite's other daemons run so, tests/conftest.py).  In process, on a
runtime without voices: nothing runs before the idle warm-up is done (the daemon's tests
start after it), nor in a period in which the model ran other work."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from appliance.core import warmup
from appliance.core.runtime import Runtime
from appliance.core.scheduler import Scheduler
from appliance.core.service import Service, Stream
from appliance.keepwarm import KeepWarm
from appliance.ops.config import parse_config
from appliance.ops.meter import KEEP_WARM
from appliance.ops.metrics import Metrics
from tests.conftest import Daemon, DaemonFactory
from tests.wire import Wire

KEEP_S = 4.0


def _runs(d: Daemon) -> tuple[int, int]:
    """The prior's runs for requests so far (a one-sentence request runs it once), and the
    touches (each runs the prior, the flow and the decoder of the bundled voice once, all
    counted as ``keep_warm``)."""
    with Wire(d.socket) as w:
        runs = w.call({"op": "stats", "id": 1})["model_runs"]
    touch_runs = int(runs.get(KEEP_WARM, {}).get("runs", 0))
    assert touch_runs % 3 == 0, runs
    return int(runs.get("prior", {}).get("runs", 0)), touch_runs // 3


def _touches(d: Daemon) -> int:
    return _runs(d)[1]


def _speak(d: Daemon, text: str) -> dict[str, object]:
    with Wire(d.socket) as w:
        return w.call({"op": "synthesize", "id": 2, "text": text})


def test_a_voice_is_kept_warm_for_keep_warm_s_after_its_request(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory({"engine": {"keep_warm_s": KEEP_S}})
    quiet = _touches(d)
    time.sleep(0.6)
    assert _touches(d) == quiet  # no request yet: nothing to keep warm
    assert _speak(d, "Turn left.")["event"] == "end"
    requests, first = _runs(d)
    time.sleep(3.2)
    # Half a second after the request, then every second while quiet (KEEP_WARM_FIRST_S,
    # KEEP_WARM_EVERY_S): 3 by now; a busy box's loop may run late.
    # They count as keep_warm's runs, not as the prior's of a request.
    assert _runs(d)[0] == requests
    assert _touches(d) >= first + 2
    # A request while it is kept warm is served as ever, and keeps it warm longer.
    assert _speak(d, "Then right.")["event"] == "end"
    ended = time.monotonic()
    time.sleep(max(0.0, ended + KEEP_S + 0.5 - time.monotonic()))
    settled = _touches(d)
    time.sleep(1.3)
    assert _touches(d) == settled  # past keep_warm_s: it stopped
    # Stopped while it keeps a voice warm: at once, cleanly.
    assert _speak(d, "Turn left.")["event"] == "end"
    time.sleep(0.5)
    t0 = time.monotonic()
    assert d.stop(timeout=15) == 0
    assert time.monotonic() - t0 < 10
    assert "Traceback" not in d.log()


def test_on_by_default(daemon_factory: DaemonFactory) -> None:
    assert parse_config({}).engine.keep_warm_s > 0
    d = daemon_factory({"engine": {"keep_warm_s": parse_config({}).engine.keep_warm_s}})
    assert _speak(d, "Turn left.")["event"] == "end"
    first = _touches(d)
    time.sleep(2.4)
    assert _touches(d) >= first + 1


def test_at_zero_a_quiet_daemon_runs_nothing(daemon: Daemon) -> None:
    assert yaml.safe_load(daemon.config_path.read_text())["engine"]["keep_warm_s"] == 0
    assert _speak(daemon, "Turn left.")["event"] == "end"
    after = _runs(daemon)
    time.sleep(0.8)
    assert _runs(daemon) == after


def _keep_warm(
    monkeypatch: pytest.MonkeyPatch,
    every_s: float,
    meanwhile: Callable[[Runtime], Awaitable[None]],
    warm_up_done: bool = True,
) -> None:
    """In process, on a runtime whose one voice is a marker and whose touches are recorded,
    not run: a request ends, no touch runs during ``meanwhile``, then touches come."""
    touched: list[object] = []
    monkeypatch.setattr(warmup, "keep_warm_touch", lambda v, meter: touched.append(v))
    cfg = parse_config({"engine": {"workers": 1, "keep_warm_s": 30.0}})
    voice = object()  # what the touch gets: only handed over here
    runtime = Runtime(cfg, {"joe": cast(Any, voice)}, "joe", Scheduler(1, name="kw"), Metrics())
    runtime.warm.done = warm_up_done
    service = Service(runtime)
    tasks: list[asyncio.Task[Any]] = []

    async def scenario() -> None:
        kw = KeepWarm(lambda: service, tasks.append, every_s=every_s)
        kw.on_request_done(cast(Stream, SimpleNamespace(voice_name="joe")))
        await meanwhile(runtime)
        assert touched == []
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


def test_nothing_is_kept_warm_until_the_idle_warm_up_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warm-up's later steps measure the CPU they take (admission's stream cost): a
    touch between two of them would count in it, so none runs until it is done."""

    async def warm_up(runtime: Runtime) -> None:
        await asyncio.sleep(0.3)  # ~15 periods, the warm-up still running
        runtime.warm.done = True

    _keep_warm(monkeypatch, 0.02, warm_up, warm_up_done=False)


def test_no_touch_in_a_period_in_which_the_model_ran_other_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream whose windows keep coming keeps the model warm by itself: between its
    windows the scheduler is idle, but no touch runs beside it; once it stops, they do."""

    async def windows(runtime: Runtime) -> None:
        owner = object()
        for _ in range(60):  # ~6 periods of a window every 20 ms, the scheduler idle between
            await runtime.scheduler.submit(
                lambda: None, deadline=time.monotonic(), realtime=True, owner=owner, kind="w"
            )
            await asyncio.sleep(0.02)

    _keep_warm(monkeypatch, 0.2, windows)


def test_the_first_touch_comes_first_s_after_the_last_request_then_every_s() -> None:
    kw = KeepWarm(cast(Any, None), lambda task: None, every_s=1.0, first_s=0.5)
    now = time.monotonic()
    kw._ended = now - 0.2  # a request ended 0.2 s ago: the first look in 0.3 s
    assert 0.25 < kw._to_next_look() <= 0.3
    kw._ended = now - 0.7  # its first look was 0.2 s ago: the next in 0.8 s
    assert 0.75 < kw._to_next_look() <= 0.8
    kw._ended = now - 3.6  # looks at 0.5, 1.5, 2.5, 3.5 s after it: the next in 0.9 s
    assert 0.85 < kw._to_next_look() <= 0.9
