"""Protocol v1 on the door frame without a socket: msgpack in, events out (in the style of
hypercorn's tests/protocol).  Each test drives one frame :class:`Session` whose protocol is
v1's own (:class:`~appliance.doors.v1.connection.V1Protocol`), on the real core and the
bundled voice, over an in-memory channel (tests/doors/frame/memory.py): the bytes the
client sends go into a plain ``asyncio.StreamReader``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.doors.frame.session import Session
from appliance.doors.v1.connection import V1Protocol
from appliance.doors.v1.server import V1Door
from appliance.ops.config import Config, LimitsConfig, VoicesConfig
from tests.doors.frame.memory import MemoryChannel


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    cfg = Config(voices=VoicesConfig(cache_dir=str(voice_cache)), limits=LimitsConfig())
    rt = Runtime.load(cfg)
    yield rt
    rt.close()


class Client:
    """One connection: what the test sends, what the session wrote back (decoded)."""

    def __init__(self, door: V1Door) -> None:
        self.reader = asyncio.StreamReader()
        self.channel = MemoryChannel()
        self.channel.mem.on_lost = self.reader.feed_eof
        self.session = Session(
            self.channel,
            lambda: door.limits,
            door.report,
            1,
            lambda s: V1Protocol(s, door, self.reader),
        )
        self.events: list[dict[str, Any]] = []
        self._unpacker = msgpack.Unpacker(raw=False)
        self.serving = asyncio.create_task(self.session.serve())

    def send(self, *msgs: object) -> None:
        for m in msgs:
            self.send_raw(msgpack.packb(m))

    def send_raw(self, data: bytes) -> None:
        self.reader.feed_data(data)

    def read(self) -> list[dict[str, Any]]:
        """Everything written so far (the client reads it: the output drains)."""
        mem = self.channel.mem
        data, mem.buf = bytes(mem.buf), bytearray()
        self._unpacker.feed(data)
        self.events += [dict(ev) for ev in self._unpacker]
        return self.events

    async def until(
        self, cond: Callable[[list[dict[str, Any]]], bool], timeout: float = 30
    ) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not cond(self.read()):
            assert loop.time() < end, f"timed out; events: {self.brief()}"
            await asyncio.sleep(0.01)

    async def close(self) -> list[dict[str, Any]]:
        """Half-close (EOF), wait for the session to end; all that was written."""
        self.reader.feed_eof()
        while not self.serving.done():
            self.read()
            await asyncio.sleep(0.01)
        await asyncio.wait_for(self.serving, 30)
        return self.read()

    def of(self, rid: int) -> list[str]:
        """The events of request ``rid`` (not the refusals of other messages with its id)."""
        return [e["event"] for e in self.events if e.get("id") == rid and not e.get("refused")]

    def brief(self) -> list[tuple[object, object]]:
        return [(e.get("id"), e.get("event")) for e in self.events]


def endings(events: list[dict[str, Any]]) -> dict[object, list[str]]:
    """Each request's terminal events (an error with ``refused`` is about a message, not
    the end of its request)."""
    out: dict[object, list[str]] = {}
    for e in events:
        if e["event"] == "end" or (e["event"] == "error" and not e.get("refused")):
            out.setdefault(e["id"], []).append(e["event"])
    return out


def run(runtime: Runtime, tmp_path: Path, scenario: Callable[[V1Door], Any]) -> None:
    async def main() -> None:
        service = Service(runtime)
        door = V1Door(service, tmp_path / "never-bound.sock")
        try:
            await asyncio.wait_for(scenario(door), 120)
        finally:
            await service.shutdown(1.0)
            service.close()

    asyncio.run(main())


def test_ping_info_and_bad_messages_each_get_one_answer(runtime: Runtime, tmp_path: Path) -> None:
    async def scenario(door: V1Door) -> None:
        c = Client(door)
        c.send({"op": "ping", "id": 1}, {"op": "info", "id": 2})
        c.send({"op": "nope", "id": 3}, None, [1, 2], {"op": "synthesize", "id": 4})
        c.send({"op": "ping", "id": 5})
        events = await c.close()
        assert c.of(1) == ["pong"]
        assert isinstance(next(e for e in events if e["id"] == 1)["warm"], bool)
        assert c.of(2) == ["info"]
        assert next(e for e in events if e["id"] == 3)["code"] == "unknown_op"
        nameless = [e for e in events if e["id"] is None]
        assert [e["code"] for e in nameless] == ["bad_request", "bad_request"]  # nil, a list
        assert "map" in nameless[0]["message"]
        assert [e["code"] for e in events if e["id"] == 4] == ["bad_request"]  # no text
        assert c.of(5) == ["pong"]  # the connection went on
        assert door.service.stats()["errors"].get("unknown_op") == 1

    run(runtime, tmp_path, scenario)


def test_synthesize_is_start_chunks_end(runtime: Runtime, tmp_path: Path) -> None:
    async def scenario(door: V1Door) -> None:
        c = Client(door)
        c.send({"op": "synthesize", "id": 7, "text": "Hello there.", "format": "s16le"})
        await c.close()  # a half-close still gets every answer
        kinds = c.of(7)
        assert kinds[0] == "start" and kinds[-1] == "end" and "chunk" in kinds
        assert set(kinds[1:-1]) == {"chunk"}
        start = next(e for e in c.events if e["event"] == "start")
        assert start["format"] == "s16le" and start["sample_rate"] > 0
        audio = b"".join(e["audio"] for e in c.events if e["event"] == "chunk")
        assert len(audio) > 0.3 * start["sample_rate"] * 2  # over 0.3 s of speech
        assert c.events[-1]["cancelled"] is False
        assert endings(c.events) == {7: ["end"]}
        assert c.channel.mem.closed and not c.channel.mem.aborted

    run(runtime, tmp_path, scenario)


def test_cancel_ends_its_target_once_and_a_stray_cancel_is_refused(
    runtime: Runtime, tmp_path: Path
) -> None:
    async def scenario(door: V1Door) -> None:
        c = Client(door)
        long = "This sentence goes on for a while so that it can be cancelled. " * 20
        c.send({"op": "synthesize", "id": 1, "text": long})
        await c.until(lambda ev: any(e["event"] == "chunk" for e in ev))
        c.send({"op": "cancel", "id": 2, "target": 1}, {"op": "cancel", "id": 3, "target": 99})
        c.send({"op": "synthesize", "id": 1, "text": "Again."})  # id 1 is free once ended
        events = await c.close()
        assert [e for e in events if e["id"] == 2] == [{"id": 2, "event": "cancelled", "target": 1}]
        stray = [e for e in events if e["id"] == 3]
        assert len(stray) == 1 and stray[0]["code"] == "bad_request"
        # the second id 1: refused as a duplicate while the first is still ending (not
        # its end), or served once it has ended; the first ends once, cancelled
        dup = [e for e in events if e["id"] == 1 and e.get("refused")]
        assert [e["code"] for e in dup] in ([], ["duplicate_id"])
        ends = [e for e in events if e["id"] == 1 and e["event"] == "end"]
        assert ends[0]["cancelled"] is True and "sent_text_span" in ends[0]
        assert endings(events) == {1: ["end"] * (2 - len(dup)), 3: ["error"]}

    run(runtime, tmp_path, scenario)


def test_text_stream_append_finish_held_before_open(runtime: Runtime, tmp_path: Path) -> None:
    """append and finish right behind the request come before its stream opens: held,
    then handed over; text after finish, or for no stream, is refused, not an end."""

    async def scenario(door: V1Door) -> None:
        c = Client(door)
        c.send({"op": "synthesize", "id": 1, "text_stream": True})
        c.send({"op": "append", "target": 1, "text": "Hello "})
        c.send({"op": "append", "target": 1, "text": "world.", "flush": True})
        c.send({"op": "finish", "target": 1})
        c.send({"op": "append", "target": 1, "text": "more"})
        c.send({"op": "append", "target": 42, "text": "nobody"})
        events = await c.close()
        refused = [e for e in events if e["event"] == "error"]
        assert [(e["id"], e["code"], e["refused"]) for e in refused] == [
            (1, "bad_request", True),
            (None, "bad_request", True),
        ]
        assert "finished" in refused[0]["message"]
        assert "42 is not an open text stream" in refused[1]["message"]
        kinds = c.of(1)
        assert kinds[0] == "start" and kinds[-1] == "end" and "chunk" in kinds
        assert endings(events) == {1: ["end"]}
        spans = [e["text_span"] for e in events if e["event"] == "chunk"]
        assert max(b for _, b in spans) == len("Hello world.")

    run(runtime, tmp_path, scenario)


def test_oversize_frame_is_refused_and_the_connection_closed(
    runtime: Runtime, tmp_path: Path
) -> None:
    async def scenario(door: V1Door) -> None:
        c = Client(door)
        c.send({"op": "ping", "id": 1})
        await c.until(lambda ev: len(ev) == 1)
        c.send({"op": "synthesize", "id": 2, "text": "a" * 4 * door.limits.max_message_bytes})
        await asyncio.wait_for(c.serving, 10)  # no EOF sent: the frame closed it
        assert c.of(1) == ["pong"]
        assert c.channel.refused is not None
        err = msgpack.unpackb(c.channel.refused, raw=False)
        assert err["id"] is None and err["code"] == "frame_too_large"
        assert c.channel.mem.eof and c.channel.mem.closed
        assert door.service.stats()["errors"].get("frame_too_large") == 1

    run(runtime, tmp_path, scenario)


def test_bytes_that_are_not_msgpack_close_with_bad_request(
    runtime: Runtime, tmp_path: Path
) -> None:
    async def scenario(door: V1Door) -> None:
        c = Client(door)
        c.send_raw(b"\xc1")  # never used by msgpack
        await asyncio.wait_for(c.serving, 10)
        assert c.channel.refused is not None
        err = msgpack.unpackb(c.channel.refused, raw=False)
        assert err["code"] == "bad_request" and "malformed msgpack" in err["message"]

    run(runtime, tmp_path, scenario)


def test_a_bug_in_a_request_ends_only_it_with_internal(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(door: V1Door) -> None:
        def broken() -> dict[str, Any]:
            raise ZeroDivisionError("a bug behind info")

        monkeypatch.setattr(door.service, "info", broken)
        c = Client(door)
        c.send({"op": "info", "id": 1}, {"op": "ping", "id": 2}, {"op": "stats", "id": 3})
        events = await c.close()
        assert [(e["event"], e["code"]) for e in events if e["id"] == 1] == [("error", "internal")]
        assert c.of(2) == ["pong"] and c.of(3) == ["stats"]
        assert door.service.stats()["errors"].get("internal") == 1

    run(runtime, tmp_path, scenario)


def test_too_many_requests_in_flight(runtime: Runtime, tmp_path: Path) -> None:
    async def scenario(door: V1Door) -> None:
        c = Client(door)
        limit = door.limits.max_inflight_per_connection
        for rid in range(limit + 1):  # text streams waiting for their text
            c.send({"op": "synthesize", "id": rid, "text_stream": True, "realtime": False})
        await c.until(lambda ev: any(e["event"] == "error" for e in ev))
        over = [e for e in c.events if e["event"] == "error"]
        assert [(e["id"], e["code"]) for e in over] == [(limit, "too_many_requests")]
        for rid in range(limit):
            c.send({"op": "cancel", "id": 1000 + rid, "target": rid})
        events = await c.close()
        ends = endings(events)
        assert ends == {rid: ["end"] for rid in range(limit)} | {limit: ["error"]}

    run(runtime, tmp_path, scenario)
