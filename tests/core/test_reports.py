"""What the core reports (appliance.core.reports) through the service, on the runtime
``Runtime.load`` builds: the drain notice against the stop in ``health``, the doors'
connections in ``stats``, and ``info``'s own fields."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.reports import Reports
from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.ops.config import parse_config
from appliance.text.visemes import VISEMES


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    cfg = parse_config({"voices": {"cache_dir": str(voice_cache)}, "engine": {"workers": 1}})
    rt = Runtime.load(cfg, warm=False)
    rt.scheduler.start()
    yield rt
    rt.close()


def test_health_tells_the_drain_notice_from_the_stop(runtime: Runtime) -> None:
    async def scenario() -> list[tuple[bool, bool]]:
        service = Service(runtime)
        seen = []
        for notice, stopping in ((False, False), (True, False), (True, True)):
            service.draining, service.stopping = notice, stopping
            h = service.health()
            seen.append((h["serving"], h["draining"]))
        service.close()
        return seen

    # Serving through the notice (balancers are told, requests still taken), not after.
    assert asyncio.run(scenario()) == [(True, False), (True, True), (False, True)]


def test_stats_count_each_doors_connections_and_info_says_warm(runtime: Runtime) -> None:
    async def scenario() -> tuple[dict[str, object], dict[str, object]]:
        service = Service(runtime)
        service.add_door("protocol-v1", lambda: 3)
        service.add_door("wyoming", lambda: 1)
        assert isinstance(service.reports, Reports)
        stats, info = service.stats(), service.info()
        service.close()
        return stats, info

    stats, info = asyncio.run(scenario())
    assert stats["connections"] == 4
    # "frontends" is the contract's older word for the doors (protocol v1's stats).
    assert stats["frontends"] == {"protocol-v1": {"connections": 3}, "wyoming": {"connections": 1}}
    assert stats["streams"] == [] and stats["workers"] == 1
    assert info["warm"] is False  # warm=False: no first packets run yet
    assert info["visemes"] == list(VISEMES)
    assert info["default_voice"] == runtime.default_voice
