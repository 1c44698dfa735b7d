"""Scheduler work items for tests: one that runs until released or stopped, and a
started scheduler that is stopped afterwards."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from appliance.core.scheduler import Scheduler, WorkTiming
from appliance.model.engine import interrupt
from appliance.model.engine.interrupt import Interrupted


@contextmanager
def running_scheduler(
    workers: int, name: str = "test", own_cores: bool = False
) -> Iterator[Scheduler]:
    s = Scheduler(workers, name=name, own_cores=own_cores)
    s.start()
    try:
        yield s
    finally:
        s.stop()


class Blocking:
    """A work item that runs until the test lets it finish, or its token stops it
    (between steps, as ONNX Runtime stops between nodes)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.finish = threading.Event()
        self.runs = 0

    def __call__(self) -> int:
        self.runs += 1
        token = interrupt.current()
        assert token is not None
        self.started.set()
        while not self.finish.wait(0.002):
            if token.stopped:
                self.started.clear()
                raise Interrupted("stopped")
        return self.runs


async def started(work: Blocking) -> None:
    assert await asyncio.to_thread(work.started.wait, 5)


async def run_blocking(
    s: Scheduler, deadline: float, owner: object, urgent: bool = False
) -> tuple[Blocking, asyncio.Future[tuple[int, WorkTiming]]]:
    """Submit a real-time :class:`Blocking` item and wait until a worker runs it."""
    work = Blocking()
    fut = s.submit(work, deadline=deadline, realtime=True, owner=owner, kind="t", urgent=urgent)
    await started(work)
    return work, fut
