"""The service's registry of live streams: numbered as they come, idle once the last one
ends, each end told to the daemon's callbacks, doors counted by their own callables."""

from __future__ import annotations

import asyncio

from appliance.core.registry import StreamRegistry


def test_streams_are_numbered_and_the_registry_is_idle_after_the_last_one() -> None:
    async def scenario() -> None:
        reg: StreamRegistry[str] = StreamRegistry()
        ended: list[int] = []
        reg.on_request_done.append(lambda _stream: ended.append(len(reg.streams)))
        assert [reg.number(), reg.number()] == [1, 2]
        assert await reg.wait_idle(0.0)  # nothing live: at once
        reg.add("a")
        reg.add("b")
        assert not await reg.wait_idle(0.05)  # two live: the timeout passes
        waiter = asyncio.create_task(reg.wait_idle(5.0))
        reg.remove("a")
        await asyncio.sleep(0)
        assert not waiter.done()
        reg.remove("b")
        assert await waiter
        assert ended == [1, 0]  # told after each end, the stream already gone

    asyncio.run(scenario())


def test_doors_are_counted_by_their_own_callables_at_each_read() -> None:
    reg: StreamRegistry[str] = StreamRegistry()
    open_now = {"n": 2}
    reg.add_door("protocol-v1", lambda: open_now["n"])
    reg.add_door("http", lambda: 0)
    assert reg.connections() == {"protocol-v1": 2, "http": 0}
    open_now["n"] = 5
    assert reg.connections()["protocol-v1"] == 5
