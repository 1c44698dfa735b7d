"""The connection policy every door shares (appliance.doors.net), without a daemon: the
one too-slow rule, the read timeouts, the refusal, the slots (hypercorn's tests/protocol/
way: the logic on fakes of the transport, the real socket only where the kernel decides)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from appliance.doors.net import (
    ClientSlots,
    ClientTooSlow,
    FrameTimeout,
    IdleTimeout,
    Outbox,
    ReadTimer,
    peer_hung_up,
    read_to_eof,
    refuse,
)
from appliance.errors import ErrorCode
from appliance.ops.config import LimitsConfig

LIMITS = LimitsConfig(client_too_slow_s=0.4, max_output_buffer_bytes=65536)


class FakeTransport(asyncio.WriteTransport):
    """A transport whose unsent bytes the test sets (what a reading client drains)."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 100_000
        self.high: int | None = None
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high = high

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def test_the_output_bound_is_the_transports() -> None:
    async def go() -> None:
        t = FakeTransport()
        box = Outbox(t, lambda: LIMITS)
        assert t.high == 65536 and box.over_bound
        t.buffered = 1000
        assert not box.over_bound

    asyncio.run(go())


def test_a_client_that_reads_steadily_is_never_too_slow() -> None:
    """Over the bound for 3 s (7× client_too_slow_s), but reading something every 0.2 s."""

    async def go() -> float:
        t = FakeTransport()
        box = Outbox(t, lambda: LIMITS)
        done = asyncio.get_running_loop().create_future()

        async def reader() -> None:
            for _ in range(15):
                await asyncio.sleep(0.2)
                t.buffered -= 1000
            done.set_result(None)

        task = asyncio.create_task(reader())
        t0 = time.monotonic()
        await box.guard(done)
        await task
        return time.monotonic() - t0

    assert asyncio.run(go()) >= 2.5


def test_a_client_that_stops_reading_is_cut_off_after_client_too_slow_s() -> None:
    async def go() -> float:
        box = Outbox(FakeTransport(), lambda: LIMITS)
        t0 = time.monotonic()
        with pytest.raises(ClientTooSlow):
            await box.guard(asyncio.get_running_loop().create_future())
        return time.monotonic() - t0

    took = asyncio.run(go())
    assert 0.4 <= took < 0.4 + 1.5


def test_the_audio_a_client_holds_is_its_grace() -> None:
    """A real-time player with 1 s of audio in hand need not read for that second."""

    async def go() -> float:
        box = Outbox(FakeTransport(), lambda: LIMITS)
        t0 = time.monotonic()
        with pytest.raises(ClientTooSlow):
            await box.guard(asyncio.get_running_loop().create_future(), grace_s=1.0)
        return time.monotonic() - t0

    took = asyncio.run(go())
    assert 1.4 <= took < 1.4 + 1.5


def test_a_write_that_finishes_is_its_result_and_a_cancel_is_a_cancel() -> None:
    async def go() -> None:
        box = Outbox(FakeTransport(), lambda: LIMITS)

        async def write() -> str:
            return "written"

        assert await box.guard(write()) == "written"
        task = asyncio.create_task(box.guard(asyncio.get_running_loop().create_future()))
        await asyncio.sleep(0.05)
        task.cancel()  # the stream's own cancel is not a ClientTooSlow
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_idle_and_frame_timeouts() -> None:
    limits = LimitsConfig(idle_timeout_s=0.3, frame_timeout_s=0.2)

    async def go() -> None:
        timer = ReadTimer(lambda: limits)
        never = asyncio.Event()
        t0 = time.monotonic()
        with pytest.raises(IdleTimeout):
            await timer.read(never.wait, partial=lambda: False, busy=lambda: False)
        assert 0.3 <= time.monotonic() - t0 < 1.0
        t0 = time.monotonic()
        with pytest.raises(FrameTimeout, match=r"incomplete message for 0\.2 s"):
            await timer.read(never.wait, partial=lambda: True, busy=lambda: False)
        assert 0.2 <= time.monotonic() - t0 < 1.0
        # While a request is in flight a silent client is not idle.
        waiting = asyncio.create_task(
            timer.read(never.wait, partial=lambda: False, busy=lambda: True)
        )
        await asyncio.sleep(0.8)
        assert not waiting.done()
        waiting.cancel()

    asyncio.run(go())


def test_a_message_begun_must_end_within_the_frame_timeout() -> None:
    """A read spanning packets (a Wyoming event) that has begun is held to frame_timeout_s,
    not to the idle timeout."""
    limits = LimitsConfig(idle_timeout_s=30.0, frame_timeout_s=0.2)

    async def go() -> None:
        timer = ReadTimer(lambda: limits)
        began = [False]

        async def slow_event() -> None:
            await asyncio.sleep(0.05)
            began[0] = True
            timer.began()
            await asyncio.sleep(5)

        t0 = time.monotonic()
        with pytest.raises(FrameTimeout):
            await timer.read(slow_event, partial=lambda: began[0], busy=lambda: False)
        assert time.monotonic() - t0 < 1.0

    asyncio.run(go())


def test_a_refusal_is_read_by_the_client_then_closed() -> None:
    async def go() -> bytes:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        theirs.setblocking(False)
        loop = asyncio.get_running_loop()
        await refuse(writer.transport, b"no, because", read_to_eof(reader), linger_s=0.5)
        got = b""
        while True:
            piece = await loop.sock_recv(theirs, 1024)
            if not piece:
                break
            got += piece
        theirs.close()
        return got

    assert asyncio.run(go()) == b"no, because"


def test_slots_cap_all_and_each_client_and_keep_some_for_root() -> None:
    limits = LimitsConfig(max_connections=4, max_connections_per_uid=2, reserved_connections=1)
    slots = ClientSlots()
    assert slots.admit(limits, 0, "a", False) is None
    assert slots.admit(limits, 1, "a", False) is None
    refused = slots.admit(limits, 2, "a", False)
    assert refused is not None and refused.code == ErrorCode.TOO_MANY_CONNECTIONS_FOR_USER
    assert slots.admit(limits, 2, "b", False) is None
    refused = slots.admit(limits, 3, "c", False)  # the last slot is root's
    assert refused is not None and refused.code == ErrorCode.TOO_MANY_CONNECTIONS
    assert slots.admit(limits, 3, "root", True) is None
    slots.give_back("a")
    assert slots.admit(limits, 2, "a", False) is None


def test_peer_hung_up_on_a_socket_already_closed() -> None:
    """Issue 42 item 17: a v1 client gone mid-request left the connection's socket closed
    (descriptor -1) while the half-close loop still polled it: ValueError, a traceback in
    the log about once in two.  A closed socket is a hung-up peer."""
    a, b = socket.socketpair()
    try:
        assert peer_hung_up(a) is False  # both ends open
        a.close()
        assert a.fileno() == -1
        assert peer_hung_up(a) is True
    finally:
        b.close()
