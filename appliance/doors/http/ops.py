"""The HTTP door's small endpoints: health, readiness, metrics, voices and models.

What it adds to the frame: answers about the box rather than speech, each a read of the
core with nothing held between requests:

- ``GET /healthz``: 200 while serving, 503 while the daemon drains or stops (the door's
  ``stopping`` too: the listener stays open so a balancer reads 503, not a refused
  connection) or when nothing can serve.
- ``GET /readyz``: 200 while the box would take a new stream now, 503 while it is full
  (admission would say ``busy``), starting or draining (:mod:`appliance.core.capacity`).
- ``GET /metrics``: the daemon's Prometheus registry (:mod:`appliance.ops.metrics`).
- ``GET /v1/audio/voices`` (with the OpenAI names and what ``http.voice_map`` maps them
  to) and ``GET /v1/models``, for clients that list them.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from appliance.core.capacity import Capacity, capacity_of
from appliance.doors.frame.door import DoorBase
from appliance.doors.http.request import OPENAI_VOICES, voice_for

MODEL_ID = "ttsd"


class OpsRoutes:
    """The endpoints above, on ``door``'s core and settings."""

    def __init__(self, door: DoorBase) -> None:
        self.door = door
        self.service = door.service

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/v1/audio/voices", self.voices)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)

    async def voices(self, request: web.Request) -> web.Response:
        info = self.service.info()
        voices = [
            {
                "id": v.get("name"),
                "name": v.get("name"),
                "language": v.get("language"),
                "sample_rate": v.get("sample_rate"),
                "speakers": v.get("speakers"),
            }
            for v in info.get("voices", [])
        ]
        default = info.get("default_voice")
        known, voice_map = self.service.runtime.voices, self.door.config.http.voice_map
        aliases = {name: voice_for(name, known, voice_map) or default for name in OPENAI_VOICES}
        return web.json_response({"voices": voices, "default": default, "openai_aliases": aliases})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "ttsd"}],
            }
        )

    async def healthz(self, request: web.Request) -> web.Response:
        health = self.service.health()
        if self.door.stopping or self.service.stopping or self.service.draining:
            health["status"] = "draining"
            health["serving"] = False
        code = 200 if health["serving"] and health["status"] in ("ok", "degraded") else 503
        return web.json_response(health, status=code)

    async def readyz(self, request: web.Request) -> web.Response:
        cap = capacity_of(self.service)
        if self.door.stopping and cap.state == "ready":
            cap = Capacity("drain", reason="stopping")
        return web.json_response(cap.to_dict(), status=200 if cap.state == "ready" else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.service.runtime.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
