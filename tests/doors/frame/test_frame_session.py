"""The door frame's life cycle without a socket: messages in, events out (in the style of
hypercorn's tests/protocol).  Each test drives one :class:`Session` over an in-memory
channel with a door in a few lines (tests/doors/frame/memory.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from appliance.ops.config import LimitsConfig
from tests.doors.frame.memory import make_session


async def _until(cond: object, timeout: float = 5.0) -> None:
    """Wait for ``cond()`` (a callable) to hold."""
    assert callable(cond)
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.01)


async def test_each_request_gets_exactly_one_end_or_error() -> None:
    session, ch, p, counts = make_session()
    serving = asyncio.create_task(session.serve())
    for msg in ("say 1", "fail 2", "say 3", None):
        p.inbox.put_nowait(msg)
    p.release.set()
    await asyncio.wait_for(serving, 5)
    out = ch.take()
    assert sorted(out) == ["end 1 said", "end 3 said", "error 2 bad_request"]
    assert ch.mem.closed and not ch.mem.aborted
    assert counts.codes == []  # a ServiceError from the body is the core's to count
    assert len(session.requests) == 0


async def test_a_bug_in_a_request_ends_only_that_request_with_internal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session, ch, p, counts = make_session()
    serving = asyncio.create_task(session.serve())
    p.inbox.put_nowait("bug 1")
    await _until(lambda: ch.mem.buf)
    p.inbox.put_nowait("say 2")
    await _until(lambda: b"end 2" in ch.mem.buf)
    p.inbox.put_nowait(None)
    with caplog.at_level(logging.ERROR):
        await asyncio.wait_for(serving, 5)
    assert ch.take() == ["error 1 internal", "end 2 said"]
    assert counts.codes == ["internal"]


async def test_a_bug_in_dispatch_ends_only_that_message_with_internal() -> None:
    session, ch, p, counts = make_session()
    serving = asyncio.create_task(session.serve())
    for msg in ("boom", "now 2", None):
        p.inbox.put_nowait(msg)
    await asyncio.wait_for(serving, 5)
    assert ch.take() == ["error None internal", "now 2"]
    assert counts.codes == ["internal"]


async def test_half_close_still_sends_every_answer() -> None:
    """EOF: no more requests, but the one in flight still ends and is told."""
    session, ch, p, _ = make_session()
    serving = asyncio.create_task(session.serve())
    p.inbox.put_nowait("hold 1")
    p.inbox.put_nowait(None)
    await asyncio.sleep(0.2)
    assert not serving.done() and not ch.mem.closed
    p.release.set()
    await asyncio.wait_for(serving, 5)
    assert ch.take() == ["end 1 held"]
    assert p.bodies_cancelled == []


async def test_eof_as_a_disconnect_cancels_the_work_and_tells_nothing() -> None:
    session, ch, p, _ = make_session()
    p.eof_disconnects = True
    serving = asyncio.create_task(session.serve())
    p.inbox.put_nowait("hold 1")
    await _until(lambda: len(session.requests) == 1)
    p.inbox.put_nowait(None)
    await asyncio.wait_for(serving, 5)
    assert p.bodies_cancelled == ["1"]
    assert ch.take() == []
    assert session.gone and ch.mem.closed


async def test_an_idle_connection_is_closed_unless_a_request_runs() -> None:
    session, ch, p, _ = make_session(LimitsConfig(idle_timeout_s=0.3))
    serving = asyncio.create_task(session.serve())
    p.inbox.put_nowait("hold 1")
    await asyncio.sleep(0.8)  # silent, but a request is in flight: not idle
    assert not serving.done()
    p.release.set()
    await asyncio.wait_for(serving, 5)  # idle once it ended
    assert ch.take() == ["end 1 held"]
    assert ch.mem.closed


async def test_a_message_begun_and_not_finished_is_refused_after_the_frame_timeout() -> None:
    session, ch, p, counts = make_session(LimitsConfig(frame_timeout_s=0.2))
    p.partial_now = True  # its first bytes came; the rest never does
    await asyncio.wait_for(session.serve(), 5)
    assert ch.refused == b"error None bad_request\n"
    assert counts.codes == ["bad_request"]
    assert ch.mem.closed


async def test_bytes_that_are_no_message_refuse_the_connection_and_stop_its_work() -> None:
    session, ch, p, counts = make_session()
    serving = asyncio.create_task(session.serve())
    p.inbox.put_nowait("hold 1")
    await _until(lambda: p.bodies_started)
    p.inbox.put_nowait("garbage")
    await asyncio.wait_for(serving, 5)
    assert ch.refused == b"error None bad_request\n"
    assert p.bodies_cancelled == ["1"]
    assert counts.codes == ["bad_request"]


async def test_a_client_that_stops_reading_is_cut_off_once() -> None:
    limits = LimitsConfig(max_output_buffer_bytes=65536, client_too_slow_s=0.3)
    session, ch, p, counts = make_session(limits)
    serving = asyncio.create_task(session.serve())
    p.inbox.put_nowait("flood 1")
    await _until(lambda: counts.codes)  # nothing is read: the client is too slow
    assert counts.codes == ["client_too_slow"]
    assert session.gone and ch.mem.closed and not ch.mem.aborted
    # Its request's error is queued behind what it did not read; nothing follows it.
    assert ch.mem.buf.endswith(b"error 1 client_too_slow\n")
    await asyncio.wait_for(serving, 5)  # dropped client_too_slow_s later
    assert ch.mem.aborted
    assert counts.codes == ["client_too_slow"]


async def test_a_refusal_is_the_error_then_the_close() -> None:
    from appliance.errors import ErrorCode, ServiceError

    session, ch, _, _ = make_session()
    await session.refuse(ServiceError(ErrorCode.SHUTTING_DOWN, "stopping"))
    assert ch.refused == b"error None shutting_down\n"
    assert ch.mem.eof and ch.mem.closed
