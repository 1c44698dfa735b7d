"""What the service core says about itself: ``info``, ``stats``, ``health`` and the gauges
``/metrics`` reads at each scrape.

Every report is computed on demand from the service's runtime, its registry of live
streams and admission (nothing is kept; O(streams + doors) per call).  The field names
are protocol v1's and the documented HTTP and metrics ones: a contract (``frontend`` and
``frontends`` there name the door a stream came through, an older word for it; in the
code "frontend" is the text pipeline).  Lifecycle: one per service, on the event loop.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from appliance.core.admission import Admission, Pressure, StreamLoad, load_limit
from appliance.core.registry import DoorCount
from appliance.core.runtime import Runtime
from appliance.errors import ErrorCode
from appliance.ops.metrics import LiveNumbers
from appliance.text.visemes import VISEMES


class LiveStream(Protocol):
    """What a report reads of one live stream (appliance.core.service.Stream)."""

    @property
    def door(self) -> str: ...

    def snapshot(self) -> dict[str, Any]: ...

    def load(self) -> StreamLoad: ...


class Reported(Protocol):
    """What a report reads of the service (appliance.core.service.Service)."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def streams(self) -> Collection[LiveStream]: ...

    @property
    def doors(self) -> Sequence[DoorCount]: ...

    @property
    def admission(self) -> Admission: ...

    @property
    def stopping(self) -> bool: ...

    def admission_pressure(self) -> Pressure: ...

    @property
    def draining(self) -> bool: ...

    @property
    def warm(self) -> bool: ...


class Reports:
    """``info``, ``stats``, ``health`` and the live gauges of one service (see the module)."""

    def __init__(self, service: Reported) -> None:
        self.service = service

    def info(self) -> dict[str, Any]:
        # The viseme set, by number (``visemes: true`` on a request: chunks carry them).
        warm = self.service.warm
        return {**self.service.runtime.info(), "warm": warm, "visemes": list(VISEMES)}

    def stats(self) -> dict[str, Any]:
        service = self.service
        rt = service.runtime
        snap = rt.metrics.snapshot()
        streams = [s.snapshot() for s in service.streams]
        snap["queue_depth"] = rt.scheduler.depth()
        snap["workers"] = rt.scheduler.workers
        snap["connections"] = sum(d.connections() for d in service.doors)
        snap["frontends"] = {d.name: {"connections": d.connections()} for d in service.doors}
        snap["streams"] = streams
        snap["scheduler"] = rt.scheduler.snapshot()
        snap["admission"] = service.admission.snapshot(
            [s.load() for s in service.streams],
            load_limit(rt.config.scheduler, service.admission_pressure()),
        )
        snap["busy_rejections"] = rt.metrics.errors.get(ErrorCode.BUSY, 0)
        # Client underruns: finished requests plus the streams still live.
        snap["stalls"] = rt.metrics.counters.get("stalls", 0) + sum(
            int(s.get("stalls", 0)) for s in streams
        )
        snap["backend"] = rt.backend_state()
        snap["model_runs"] = {part: c.as_dict() for part, c in rt.meter.snapshot().items()}
        if rt.player is not None:
            snap["playback"] = rt.player.stats()
        return snap

    def live_numbers(self) -> LiveNumbers:
        """The gauges ``/metrics`` reads at each scrape (counters live in the registry)."""
        service = self.service
        rt = service.runtime
        streams: dict[str, int] = {}
        for s in service.streams:
            streams[s.door] = streams.get(s.door, 0) + 1
        health = self.health()
        playback = None
        if rt.player is not None:
            playback = {**rt.player.stats(), "state": health["playback"].get("state")}
        return LiveNumbers(
            queue_depth=rt.scheduler.depth(),
            streams=streams,
            live_stalls=sum(int(s.snapshot()["stalls"]) for s in service.streams),
            connections={d.name: d.connections() for d in service.doors},
            backend=rt.backend_state(),
            playback=playback,
            health=str(health["status"]),
            serving=bool(health["serving"]),
            cpu_wait=rt.scheduler.cpu_wait.share,
            admission_limit=load_limit(rt.config.scheduler, service.admission_pressure()),
            cpu_quota=rt.scheduler.quota,
            model_runs=rt.meter.snapshot(),
        )

    def health(self) -> dict[str, Any]:
        """Whether requests can be served.  The speaker has its own field: a box without
        one that synthesizes fine is ``ok``."""
        service = self.service
        rt = service.runtime
        age = rt.scheduler.heartbeat_age()
        backend = rt.backend_state()
        status = "ok"
        if backend.get("status") == "degraded":
            status = "degraded"
        playback = rt.player.health() if rt.player is not None else {"state": "off"}
        if playback.get("state") == "degraded":
            # A speaker that worked was lost: ``speak`` cannot be served until it is back.
            # A box that never had one ("off") serves everything it offers.
            status = "degraded"
        if age > 10.0:
            status = "failing"
        return {
            "playback": playback,
            "status": status,
            # Start-up: speak waits while the speaker starts (READY=1 comes when this is
            # false); "starting" is the older name of "not warm".
            "warm": service.warm,
            "starting": not service.warm,
            # The rest of the warm-up, in the background while nothing else runs.
            "warm_up": "done" if rt.warm_up_done else "running",
            "serving": not service.stopping and status != "failing",
            # True from the drain notice on (SIGTERM's, then the stop itself).
            "draining": service.draining or service.stopping,
            "backend": backend.get("backend", "onnx-cpu"),
            "gpu": backend.get("gpu"),
            "failovers": backend.get("failovers", 0),
            "last_alarm": backend.get("last_alarm"),
            "queue_depth": rt.scheduler.depth(),
            "streams": len(service.streams),
            "uptime_s": round(rt.metrics.uptime_s(), 1),
            "worker_heartbeat_age_s": round(age, 2),
        }
