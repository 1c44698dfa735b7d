"""The daemon's doors as one (appliance.doors.doorset) on the service ``Runtime.load``
builds, with real sockets and no daemon: built from the config in order, all started, or
False at the first that cannot listen, and closed whole either way (no socket file left
behind by a door that did start)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.doors.doorset import DoorSet, wyoming_warnings
from appliance.ops.config import parse_config


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    cfg = parse_config({"voices": {"cache_dir": str(voice_cache)}, "engine": {"workers": 1}})
    rt = Runtime.load(cfg, warm=False)
    rt.scheduler.start()
    yield rt
    rt.close()


def test_a_door_that_cannot_listen_fails_the_start_and_close_removes_the_rest(
    runtime: Runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    cfg = parse_config({"http": {"listen": f"127.0.0.1:{port}"}})
    path = tmp_path / "v1.sock"

    async def scenario() -> tuple[list[str], bool, bool]:
        service = Service(runtime)
        doors = DoorSet.from_config(service, cfg, path, None)
        names = [d.name for d in doors.doors]
        with caplog.at_level(logging.ERROR, logger="ttsd"):
            started = await doors.start()
        bound = path.exists()  # v1 came first and listens
        doors.close_listeners()
        await doors.close()
        service.close()
        return names, started, bound

    try:
        names, started, bound = asyncio.run(scenario())
    finally:
        taken.close()
    assert names == ["protocol-v1", "http"]
    assert not started and bound and not path.exists()
    assert [r.getMessage() for r in caplog.records if "cannot listen" in r.getMessage()]


def test_wyoming_warns_of_a_listener_others_reach_but_only_loopback_may_use() -> None:
    open_tcp = parse_config({"wyoming": {"uri": "tcp://0.0.0.0:10200"}})
    local = parse_config({"wyoming": {"uri": "tcp://127.0.0.1:10200"}})
    assert "allowed_networks" in " ".join(wyoming_warnings(open_tcp))
    assert wyoming_warnings(local) == []
