"""What a serving daemon tells systemd (appliance.upkeep), on a real datagram socket as
``$NOTIFY_SOCKET`` and no daemon: READY=1 with its status line once serving and after a
reload, and a STATUS line as requests end at most every couple of seconds; and its heap
trims: one at most every ``TRIM_EVERY_S`` after requests end, busy or idle, and (the real
daemon) one after the idle warm-up."""

from __future__ import annotations

import asyncio
import gc
import itertools
import socket
import time
import weakref
from pathlib import Path
from typing import Any

from appliance import upkeep as upkeep_module
from appliance.core.runtime import Runtime
from appliance.core.scheduler import Scheduler
from appliance.ops import memory
from appliance.ops.config import parse_config
from appliance.ops.metrics import Metrics
from appliance.ops.notify import Notifier
from appliance.upkeep import TRIM_EVERY_S, Upkeep, status_line
from tests.conftest import DaemonFactory
from tests.wire import Wire


def _received(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_ready_reloaded_and_status_lines_reach_the_manager(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    manager.bind(path)
    manager.setblocking(False)
    # A runtime with no voices: what systemd is told reads only its metrics and names.
    runtime = Runtime(parse_config({}), {}, "none", Scheduler(1), Metrics())
    notifier = Notifier.for_address(path)
    tasks: list[asyncio.Task[Any]] = []

    async def scenario() -> list[str]:
        upkeep = Upkeep(notifier, lambda: runtime, tasks.append)
        upkeep.ready(None)
        upkeep.on_request_done()
        upkeep.on_request_done()  # within 2 s of the last: not said again
        upkeep.reloaded()
        return _received(manager)

    try:
        said = asyncio.run(scenario())
    finally:
        notifier.close()
        manager.close()
    line = status_line(runtime)
    assert line == "backend=onnx-cpu voices= served=0"
    assert said == [f"READY=1\nSTATUS={line}", f"STATUS={line}", f"READY=1\nSTATUS={line}"]
    # Nothing owed, no watchdog asked for: the one task is the trim the requests asked for.
    assert [t.get_coro().__qualname__ for t in tasks] == ["Upkeep._trim"]  # type: ignore[union-attr]


def _trims(monkeypatch: Any, every_s: float) -> list[float]:
    """The times of the upkeep's heap trims (each still the real ``malloc_trim``; no
    collection before it: a test process's heap takes it far longer than the daemon's,
    and these tests time the trims' spacing)."""
    real, done = memory.trim, []

    def trim() -> bool:
        done.append(time.monotonic())
        return real()

    monkeypatch.setattr(memory, "trim", trim)
    monkeypatch.setattr(memory, "collect_garbage", lambda: 0)
    monkeypatch.setattr(upkeep_module, "TRIM_EVERY_S", every_s)
    return done


def test_a_busy_daemon_is_trimmed_at_most_every_trim_interval(monkeypatch: Any) -> None:
    """Requests end one after another while others are queued: the freed heap is still
    handed back, once per interval (it was not while the scheduler had work: +10 MB of
    free heap per 100 mixed requests from two clients, given back only by a trim).

    The spacing is that of the trims' starts, on the loop: each then runs in a worker
    thread, which a busy box may start a few tens of ms late (one trim ran 56 ms after
    the one before, started 100 ms apart)."""
    trims = _trims(monkeypatch, 0.1)
    scheduler = Scheduler(1)  # never started: what is submitted stays queued
    runtime = Runtime(parse_config({}), {}, "none", scheduler, Metrics())
    tasks: set[asyncio.Task[Any]] = set()
    started: list[float] = []

    async def scenario() -> None:
        scheduler.submit(lambda: None, deadline=0.0, realtime=False, owner=1, kind="t")
        assert scheduler.depth() == 1
        upkeep = Upkeep(Notifier.disabled(), lambda: runtime, tasks.add)
        began = upkeep._last_trim
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.55:
            upkeep.on_request_done()
            await asyncio.sleep(0.01)
            if upkeep._last_trim != began and upkeep._last_trim not in started:
                started.append(upkeep._last_trim)
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
    assert 3 <= len(trims) <= 7, trims
    assert 3 <= len(started) <= len(trims), (started, trims)
    assert all(b - a >= 0.099 for a, b in itertools.pairwise(started)), started


def test_the_last_request_of_a_burst_is_followed_by_a_trim(monkeypatch: Any) -> None:
    """Two requests end within the interval: the second's freed heap is handed back once
    the interval has passed, though no request ends after it (an idle daemon kept it)."""
    trims = _trims(monkeypatch, 0.2)
    runtime = Runtime(parse_config({}), {}, "none", Scheduler(1), Metrics())
    tasks: set[asyncio.Task[Any]] = set()

    async def scenario() -> float:
        upkeep = Upkeep(Notifier.disabled(), lambda: runtime, tasks.add)
        await asyncio.sleep(0.25)  # the interval since the upkeep began has passed
        upkeep.on_request_done()
        await asyncio.sleep(0.05)
        upkeep.on_request_done()
        last = time.monotonic()
        await asyncio.sleep(0.5)
        return last

    last = asyncio.run(scenario())
    assert len(trims) == 2, trims
    assert trims[1] > last


def test_a_trim_waits_while_real_time_work_is_queued(monkeypatch: Any) -> None:
    """A due trim holds back while a real-time item waits (a thread allocating during the
    trim waits for it), goes ahead once it is gone, and waits no longer than
    ``TRIM_WAIT_S`` when real-time work never pauses."""
    trims = _trims(monkeypatch, 0.05)
    monkeypatch.setattr(upkeep_module, "TRIM_RETRY_S", 0.02)
    scheduler = Scheduler(1)  # never started: what is submitted stays queued
    runtime = Runtime(parse_config({}), {}, "none", scheduler, Metrics())
    tasks: set[asyncio.Task[Any]] = set()

    async def scenario() -> tuple[int, int, int]:
        upkeep = Upkeep(Notifier.disabled(), lambda: runtime, tasks.add)
        monkeypatch.setattr(upkeep_module, "TRIM_WAIT_S", 60.0)
        scheduler.submit(lambda: None, deadline=0.0, realtime=True, owner=1, kind="t")
        upkeep.on_request_done()
        await asyncio.sleep(0.4)
        held = len(trims)
        scheduler.cancel_owner(1)
        await asyncio.sleep(0.2)
        after = len(trims)
        monkeypatch.setattr(upkeep_module, "TRIM_WAIT_S", 0.2)
        scheduler.submit(lambda: None, deadline=0.0, realtime=True, owner=2, kind="t")
        upkeep.on_request_done()
        await asyncio.sleep(0.6)
        return held, after, len(trims)

    assert asyncio.run(scenario()) == (0, 1, 2)


def test_a_trim_hands_back_the_backends_free_memory_first(monkeypatch: Any) -> None:
    """The upkeep's trim is the runtime's release: each voice's backend gives back what its
    runs left (ONNX Runtime's free arena regions), then glibc's heap is trimmed."""
    done: list[str] = []

    def trim() -> bool:
        done.append("heap")
        return True

    monkeypatch.setattr(memory, "trim", trim)
    monkeypatch.setattr(upkeep_module, "TRIM_EVERY_S", 0.0)
    runtime = Runtime(parse_config({}), {}, "none", Scheduler(1), Metrics())
    real = Runtime.release_memory

    def release(rt: Runtime) -> None:
        done.append("release")
        real(rt)

    monkeypatch.setattr(Runtime, "release_memory", release)
    tasks: set[asyncio.Task[Any]] = set()

    async def scenario() -> None:
        Upkeep(Notifier.disabled(), lambda: runtime, tasks.add).on_request_done()
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
    assert done == ["release", "heap"]


class _Held:
    """Stands for a dropped connection: its objects in a cycle, as its write error's
    traceback puts them."""

    def __init__(self) -> None:
        self.me = self


def test_a_trim_frees_garbage_in_cycles_before_the_heap_is_trimmed(monkeypatch: Any) -> None:
    """A client that left mid-stream leaves its connection and its last audio in reference
    cycles; an idle daemon runs no collection of its own (docs/speed.md, stop 66)."""
    held = _Held()
    gone = weakref.ref(held)
    seen: list[bool] = []

    def trim() -> bool:
        seen.append(gone() is None)  # freed before glibc is asked to give pages back
        return True

    monkeypatch.setattr(memory, "trim", trim)
    monkeypatch.setattr(upkeep_module, "TRIM_EVERY_S", 0.0)
    runtime = Runtime(parse_config({}), {}, "none", Scheduler(1), Metrics())
    tasks: set[asyncio.Task[Any]] = set()

    async def scenario() -> None:
        Upkeep(Notifier.disabled(), lambda: runtime, tasks.add).on_request_done()
        await asyncio.gather(*tasks)

    gc.disable()  # as in an idle daemon: no allocations set a collection off
    try:
        del held
        assert gone() is not None
        asyncio.run(scenario())
    finally:
        gc.enable()
    assert seen == [True]


def test_the_idle_warm_up_is_followed_by_a_trim(daemon_factory: DaemonFactory) -> None:
    """No request at all: the heap the idle warm-up's runs freed is handed back once it is
    done (an idle daemon held ~10 MB of it until its first request ended)."""
    d = daemon_factory({"logging": {"level": "debug"}})
    said = "memory: freed heap handed back: RSS "
    deadline = time.monotonic() + 300
    with Wire(d.socket) as w:
        while w.call({"op": "health", "id": 1})["warm_up"] != "done":
            assert time.monotonic() < deadline, d.log()[-3000:]
            time.sleep(0.05)
    deadline = time.monotonic() + TRIM_EVERY_S + 20  # generous: a busy shared box
    while said not in d.log():
        assert d.alive() and time.monotonic() < deadline, d.log()[-3000:]
        time.sleep(0.05)
    line = d.log().split(said, 1)[1].splitlines()[0]  # "175.4 -> 163.5 MB"
    before, after = (float(x) for x in line.removesuffix(" MB").split(" -> "))
    assert after <= before, line


def test_after_a_reload_the_start_up_is_frozen_again_once_nobody_is_connected(
    monkeypatch: Any,
) -> None:
    """A reload thaws what start-up froze (what it replaces may sit in cycles); the trims
    after it freeze again, but not while a client is connected or a request in flight: a
    connection's objects frozen would stay for good if they died in a cycle."""
    _trims(monkeypatch, 0.05)
    monkeypatch.setattr(upkeep_module, "REFREEZE_RETRY_S", 0.05)
    runtime = Runtime(parse_config({}), {}, "none", Scheduler(1), Metrics())
    tasks: set[asyncio.Task[Any]] = set()
    connected = [True]

    async def scenario() -> tuple[int, int]:
        upkeep = Upkeep(Notifier.disabled(), lambda: runtime, tasks.add, lambda: not connected[0])
        memory.thaw()  # as the reload does
        upkeep.thawed()
        await asyncio.sleep(0.3)  # several trims, each finding a client
        while_connected = gc.get_freeze_count()
        connected[0] = False
        await asyncio.sleep(0.3)
        return while_connected, gc.get_freeze_count()

    try:
        while_connected, after = asyncio.run(scenario())
    finally:
        memory.thaw()
    assert while_connected == 0
    assert after > 1000
