"""Past capacity, new real-time requests are told ``busy``; the admitted ones play through."""

from __future__ import annotations

import asyncio

import pytest

from appliance.ops.config import SchedulerConfig
from bench.concurrency import StreamResult
from tests.conftest import DaemonFactory
from tests.core.scheduling.sched_helpers import LONG_TEXT, one_stream, stalled_too_long, stats

# Real-time streams are timed here: `make test` runs this file after the others, alone
# (the suite's second test process would be a CPU hog beside it; see the Makefile).
pytestmark = pytest.mark.solo


async def test_overload_gets_busy_and_admitted_streams_keep_playing(
    daemon_factory: DaemonFactory,
) -> None:
    defaults = SchedulerConfig()  # the product's admission, not the tests' roomy one
    daemon = daemon_factory(
        {
            "scheduler": {
                "admission_max_load": defaults.admission_max_load,
                "admission_backlog_ms": defaults.admission_backlog_ms,
            }
        }
    )
    await one_stream(daemon, play_out=False, client_buffer_s=1e9)  # measures the RTF
    before = (await stats(daemon))["stalls"]
    tasks: list[asyncio.Task[StreamResult]] = []
    busy: list[StreamResult] = []
    # New real-time streams keep arriving until the daemon says it is full.
    for _ in range(60):
        t = asyncio.create_task(one_stream(daemon, LONG_TEXT))
        await asyncio.sleep(0.25)
        if t.done() and t.result().outcome == "busy":
            busy.append(t.result())
            if len(busy) >= 3:
                break
        else:
            tasks.append(t)
    results = await asyncio.gather(*tasks)
    admitted = [r for r in results if r.outcome == "end"]
    busy += [r for r in results if r.outcome == "busy"]
    assert busy, "60 concurrent streams on this machine should exceed its capacity"
    assert all(r.retry_after_ms is not None and r.retry_after_ms > 0 for r in busy)
    assert len(admitted) >= 2
    assert all(r.outcome in ("end", "busy") for r in results), results
    assert not stalled_too_long(admitted), admitted
    st = await stats(daemon)
    assert st["busy_rejections"] >= len(busy)
    assert st["admission"]["busy_rejections"] >= len(busy)
    assert st["stalls"] == before + sum(r.server_stalls for r in admitted)
    # Once the admitted streams are done, the daemon takes new work again (read as it
    # comes: a real-time reader only made this wait the ~12 s of its audio).
    res = await one_stream(daemon, LONG_TEXT, play_out=False, client_buffer_s=1e9)
    assert res.outcome == "end", res
