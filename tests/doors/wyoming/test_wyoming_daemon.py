"""Admission (``busy``) and shutdown through the Wyoming door, on a daemon of their own."""

from __future__ import annotations

import asyncio
import signal

import pytest
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize

from tests.conftest import Daemon, DaemonFactory
from tests.doors.wyoming.wyoming_helpers import LONG_TEXT, client_for, read_response, wyoming_uri


@pytest.fixture(scope="module")
def tight(daemon_factory: DaemonFactory) -> Daemon:
    return daemon_factory(
        {
            "wyoming": {"uri": "tcp://127.0.0.1:0"},
            "scheduler": {"admission_max_load": 0.05},
        }
    )


async def test_busy_is_an_error_event_and_the_connection_goes_on(tight: Daemon) -> None:
    uri = wyoming_uri(tight)
    clients = [client_for(uri) for _ in range(4)]
    for c in clients:
        await c.connect()
    try:
        for c in clients:
            await c.write_event(Synthesize(text=LONG_TEXT).event())
        results = await asyncio.gather(*(read_response(c) for c in clients))
        busy = [(c, r) for c, r in zip(clients, results, strict=True) if r.error is not None]
        assert busy, "four long streams at admission_max_load 0.05 should be refused"
        for c, r in busy:
            assert r.error is not None and r.error.code == "busy", r.error
            assert r.types == ["error"]  # refused before audio-start
            await c.write_event(Describe().event())
            ev = await c.read_event()
            assert ev is not None and Info.is_type(ev.type)
    finally:
        for c in clients:
            await c.disconnect()


async def test_shutdown_ends_a_stream_with_shutting_down(daemon_factory: DaemonFactory) -> None:
    d = daemon_factory(
        {"wyoming": {"uri": "tcp://127.0.0.1:0"}, "limits": {"shutdown_timeout_s": 0.5}}
    )
    uri = wyoming_uri(d)
    async with client_for(uri) as c:
        await c.write_event(Synthesize(text=LONG_TEXT * 2).event())
        ev = await c.read_event()
        assert ev is not None and ev.type in ("audio-start", "error")
        if ev.type == "error":
            pytest.fail(f"refused: {ev.data}")
        d.proc.send_signal(signal.SIGTERM)
        types = []
        while (ev := await c.read_event()) is not None:
            types.append(ev.type)
            if ev.type == "error":
                assert ev.data["code"] == "shutting_down", ev
                break
        assert types and types[-1] == "error", types[-5:]
    assert d.proc.wait(timeout=30) == 0
