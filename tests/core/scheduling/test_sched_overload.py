"""Past capacity, new real-time requests are told ``busy``; the admitted ones do not stall."""

from __future__ import annotations

import asyncio

import pytest

from appliance.ops.config import SchedulerConfig
from bench.concurrency import StreamResult
from tests.conftest import DaemonFactory
from tests.core.scheduling.sched_helpers import LONG_TEXT, one_stream, stats

# Real-time streams must not stall here: `make test` runs this file after the others, alone
# (the suite's second test process would be a CPU hog beside it; see the Makefile).
pytestmark = pytest.mark.solo


async def test_overload_gets_busy_and_admitted_streams_do_not_stall(
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
    stalled = [r for r in admitted if r.stalls]
    assert not stalled, (len(admitted), stalled)
    st = await stats(daemon)
    assert st["busy_rejections"] >= len(busy)
    assert st["admission"]["busy_rejections"] >= len(busy)
    assert st["stalls"] == 0
    # Once the admitted streams are done, the daemon takes new work again (read as it
    # comes: a real-time reader only made this wait the ~12 s of its audio).
    res = await one_stream(daemon, LONG_TEXT, play_out=False, client_buffer_s=1e9)
    assert res.outcome == "end", res
