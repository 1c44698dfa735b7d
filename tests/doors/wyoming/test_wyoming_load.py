"""Under load: disconnects free their work at once, 8 clients are all served, ``describe``
is answered while every worker is busy."""

from __future__ import annotations

import asyncio
import statistics
import time

from wyoming.audio import AudioChunk
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart

from tests.conftest import Daemon
from tests.core.scheduling.sched_helpers import stats, wait_for
from tests.doors.wyoming.wyoming_helpers import LONG_TEXT, SHORT_TEXT, client_for, request


def idle(st: dict[str, object]) -> bool:
    return st["queue_depth"] == 0 and not st["streams"]


async def _first_chunk_then_leave(uri: str, *events: object) -> None:
    async with client_for(uri) as c:
        for e in events:
            await c.write_event(e)  # type: ignore[arg-type]
        while True:
            ev = await c.read_event()
            assert ev is not None
            if AudioChunk.is_type(ev.type):
                return  # disconnect with most of the audio still to make


async def test_disconnect_mid_one_shot_frees_the_work(wy_uri: str, wy_daemon: Daemon) -> None:
    await _first_chunk_then_leave(wy_uri, Synthesize(text=LONG_TEXT * 3).event())
    st = await wait_for(wy_daemon, idle, timeout=5.0)
    assert idle(st), st


async def test_disconnect_mid_stream_frees_the_work(wy_uri: str, wy_daemon: Daemon) -> None:
    events = [SynthesizeStart().event()]
    events += [SynthesizeChunk(text=LONG_TEXT[i : i + 4]).event() for i in range(0, 300, 4)]
    await _first_chunk_then_leave(wy_uri, *events)
    st = await wait_for(wy_daemon, idle, timeout=5.0)
    assert idle(st), st
    assert st["frontends"]["wyoming"]["connections"] == 0


async def test_eight_concurrent_clients_are_all_served(wy_uri: str, wy_daemon: Daemon) -> None:
    texts = [f"Client number {i} says: {SHORT_TEXT}" for i in range(8)]
    results = await asyncio.gather(*(request(wy_uri, Synthesize(text=t).event()) for t in texts))
    for r in results:
        assert r.error is None, r.error
        assert r.types[0] == "audio-start" and r.types[-1] == "audio-stop"
        assert len(r.audio()) / 22050 > 1.5
    st = await wait_for(wy_daemon, idle, timeout=5.0)
    assert idle(st)


async def _describe_s(uri: str) -> float:
    async with client_for(uri) as c:
        t0 = time.perf_counter()
        await c.write_event(Describe().event())
        ev = await c.read_event()
        dt = time.perf_counter() - t0
    assert ev is not None and Info.is_type(ev.type)
    return dt


async def test_describe_is_answered_while_every_worker_is_busy(
    wy_uri: str, wy_daemon: Daemon
) -> None:
    baseline = statistics.median([await _describe_s(wy_uri) for _ in range(5)])
    # Long requests read as fast as they come: the workers never wait for a client.
    load = [
        asyncio.create_task(request(wy_uri, Synthesize(text=LONG_TEXT).event())) for _ in range(8)
    ]
    busy: list[float] = []
    running: list[int] = []
    # Sampled from the start until every worker was seen running inference (else this
    # proves nothing): the streams' first items keep both busy, but once the streams are
    # ahead of their listeners one worker decodes ahead and the other waits for due work.
    st = await stats(wy_daemon)
    while len(busy) < 5 or (max(running) < st["workers"] and not all(t.done() for t in load)):
        busy.append(await _describe_s(wy_uri))
        st = await stats(wy_daemon)
        running.append(st["scheduler"]["running"])
        await asyncio.sleep(0.02)
    results = await asyncio.gather(*load)
    assert all(r.error is None for r in results), [r.error for r in results]
    assert max(running) == st["workers"], running
    assert statistics.median(busy) < 0.1 + 5 * baseline, (baseline, busy)
