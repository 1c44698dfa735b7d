"""Many streams at once on the real daemon: no stalls, fast newcomers, clean cancels and drops."""

from __future__ import annotations

import asyncio
import random
import socket
from typing import Any

import msgpack
import pytest

from bench.concurrency import StreamConnection
from tests.conftest import Daemon, DaemonFactory
from tests.scheduling.sched_helpers import (
    LONG_TEXT,
    SHORT_TEXT,
    fd_count,
    one_stream,
    rss_mb,
    stats,
    ttfp_ms,
    wait_for,
)


@pytest.fixture(scope="module")
def sched_daemon(daemon_factory: DaemonFactory) -> Daemon:
    d = daemon_factory(
        {
            "server": {
                "client_too_slow_s": 4.0,
                "max_output_buffer_bytes": 65536,
                "max_connections": 600,
                "max_connections_per_uid": 600,
            },
            # This module tests scheduling and back-pressure; admission (tested in
            # test_sched_overload) would rightly refuse streams when other jobs share CI's
            # cores, and hide what is tested here.
            "scheduler": {"admission_max_load": 4.0},
        }
    )
    # The first request measures the real-time factor admission works from.
    asyncio.run(one_stream(d, play_out=False, client_buffer_s=1e9))
    return d


async def test_four_realtime_clients_do_not_stall(sched_daemon: Daemon) -> None:
    before = (await stats(sched_daemon))["stalls"]
    results = await asyncio.gather(*(one_stream(sched_daemon) for _ in range(4)))
    for res in results:
        assert res.outcome == "end", res
        assert res.audio_s > 8.0
        assert res.stalls == 0, results
        assert res.server_stalls == 0, results
    st = await stats(sched_daemon)
    assert st["stalls"] == before
    assert st["busy_rejections"] == 0


async def _never_reads(daemon: Daemon, text: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(daemon.socket)
    sock.sendall(msgpack.packb({"op": "synthesize", "id": 1, "text": text}))
    return sock


async def test_newcomer_and_a_client_that_never_reads(sched_daemon: Daemon) -> None:
    idle = await ttfp_ms(sched_daemon)
    running = [asyncio.create_task(one_stream(sched_daemon, LONG_TEXT * 2)) for _ in range(4)]
    await asyncio.sleep(3.0)  # past the start-up burst: four streams in steady state
    busy_4 = await ttfp_ms(sched_daemon)
    assert busy_4 <= 2 * idle, (idle, busy_4)

    # A client that stops reading: its stream pauses (no queued work), others go on.
    stuck = await _never_reads(sched_daemon, LONG_TEXT * 20)
    try:
        st = await wait_for(
            sched_daemon,
            lambda s: any(x["audio_ms"] > 0 for x in s["streams"] if x["connection"]),
            timeout=10,
        )
        await asyncio.sleep(1.0)
        with_stuck = await ttfp_ms(sched_daemon)
        assert with_stuck <= 2 * idle, (idle, with_stuck)
        st = await stats(sched_daemon)
        # 4 streams + the stuck one: its produced audio is bounded by the output buffer
        # (64 KiB of s16le at 22050 Hz is 1.5 s, plus what the socket holds).
        stuck_streams = [s for s in st["streams"] if s["audio_ms"] > 0]
        assert stuck_streams
        assert max(s["audio_ms"] for s in st["streams"]) < 60_000
    finally:
        results = await asyncio.gather(*running)
        stuck.settimeout(10)
        got = b""
        # After client_too_slow_s the daemon ends the stuck request with its error.
        unpacker = msgpack.Unpacker(raw=False)
        codes: list[str] = []
        while "client_too_slow" not in codes:
            got = stuck.recv(1 << 20)
            if not got:
                break
            unpacker.feed(got)
            codes += [m.get("code") for m in unpacker if m.get("event") == "error"]
        stuck.close()
    assert "client_too_slow" in codes
    for res in results:
        assert res.outcome == "end", res
        assert res.stalls == 0, results


async def test_slow_clients_keep_memory_bounded(sched_daemon: Daemon) -> None:
    base = rss_mb(sched_daemon)
    # 20000 characters is ~20 minutes of audio (~55 MB of s16le) per client.
    text = (LONG_TEXT + " ") * 70
    socks = [await _never_reads(sched_daemon, text[:19000]) for _ in range(12)]
    try:
        st = await wait_for(
            sched_daemon,
            lambda s: len(s["streams"]) == 12 and s["queue_depth"] == 0,
            timeout=30,
        )
        assert len(st["streams"]) == 12, st["streams"]
        # Every stream is paused on its full output buffer: no queued or running work.
        assert st["queue_depth"] == 0
        await asyncio.sleep(1.0)
        assert rss_mb(sched_daemon) - base < 150, (base, rss_mb(sched_daemon))
        assert all(s["audio_ms"] < 60_000 for s in st["streams"]), st["streams"]
    finally:
        for s in socks:
            s.close()
    st = await wait_for(sched_daemon, lambda s: not s["streams"] and s["queue_depth"] == 0)
    assert st["queue_depth"] == 0 and not st["streams"]


async def test_200_cancels_leave_the_queue_empty(sched_daemon: Daemon) -> None:
    rng = random.Random(3)
    before = (await stats(sched_daemon))["scheduler"]["cancelled_items"]

    async def canceller(k: int) -> list[str]:
        conn = await StreamConnection.open(sched_daemon.socket)
        outcomes = []
        try:
            for _ in range(20):
                rid = conn.next_id()
                await conn.send({"op": "synthesize", "id": rid, "text": LONG_TEXT})
                when = rng.choice(("now", "start", "chunk"))
                if when != "now":
                    while True:
                        ev = await conn.recv()
                        assert ev is not None
                        if ev.get("id") == rid and ev["event"] in (when, "chunk"):
                            break
                await conn.send({"op": "cancel", "id": conn.next_id(), "target": rid})
                while True:
                    ev = await conn.recv()
                    assert ev is not None
                    if ev.get("id") == rid and ev["event"] in ("end", "error"):
                        outcomes.append("cancelled" if ev.get("cancelled") else ev["event"])
                        break
        finally:
            await conn.close()
        return outcomes

    outcomes = [o for os_ in await asyncio.gather(*(canceller(k) for k in range(10))) for o in os_]
    assert len(outcomes) == 200
    assert outcomes.count("cancelled") >= 150, outcomes
    st = await wait_for(sched_daemon, lambda s: s["queue_depth"] == 0, timeout=5)
    assert st["queue_depth"] == 0
    assert st["scheduler"]["cancelled_items"] > before
    assert sched_daemon.alive()
    res = await one_stream(sched_daemon, SHORT_TEXT, play_out=False)
    assert res.outcome == "end" and res.audio_s > 1.0


async def _drop(daemon: Daemon, k: int) -> None:
    reader, writer = await asyncio.open_unix_connection(daemon.socket)
    try:
        kind = k % 4
        if kind == 1:  # a request, dropped before its first chunk
            writer.write(msgpack.packb({"op": "synthesize", "id": 1, "text": LONG_TEXT}))
        elif kind == 2:  # dropped mid-stream
            writer.write(msgpack.packb({"op": "synthesize", "id": 1, "text": LONG_TEXT}))
            unpacker = msgpack.Unpacker(raw=False)
            seen: list[Any] = []
            # A chunk, or the end of the request (busy under load is an answer too).
            while not any(m.get("event") in ("chunk", "error", "end") for m in seen):
                data = await reader.read(65536)
                if not data:
                    break
                unpacker.feed(data)
                seen += list(unpacker)
        elif kind == 3:  # half a frame
            writer.write(msgpack.packb({"op": "synthesize", "id": 1, "text": LONG_TEXT})[:9])
        await writer.drain()
    finally:
        writer.close()


async def test_500_dropped_connections_return_to_baseline(sched_daemon: Daemon) -> None:
    await wait_for(sched_daemon, lambda s: s["queue_depth"] == 0 and not s["streams"])
    base_fds = fd_count(sched_daemon)
    for start in range(0, 500, 50):
        await asyncio.gather(*(_drop(sched_daemon, k) for k in range(start, start + 50)))
    st = await wait_for(
        sched_daemon,
        lambda s: s["queue_depth"] == 0 and not s["streams"] and s["connections"] == 1,
    )
    assert st["queue_depth"] == 0 and not st["streams"] and st["connections"] == 1, st
    # The stats connection of wait_for is closed by now; give the daemon a moment to reap it.
    for _ in range(50):
        if fd_count(sched_daemon) <= base_fds:
            break
        await asyncio.sleep(0.1)
    assert fd_count(sched_daemon) <= base_fds
    assert sched_daemon.alive()
