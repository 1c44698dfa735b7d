"""What the daemon runs (:class:`Door`: start, the stop in three steps, close) and what
every door stands on (:class:`DoorBase`: the core it serves and its settings).

A door on the frame is a :class:`Door`; so is the HTTP door (aiohttp's connections).

Settings come from one place: :attr:`DoorBase.config` is the daemon's one config (the
runtime's, where a SIGHUP puts its live changes), read on every use; no door keeps a
copy from start-up.
"""

from __future__ import annotations

from typing import Protocol

from appliance.core.service import Service
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config, LimitsConfig

SHUTTING_DOWN = "the daemon is shutting down"


class Door(Protocol):
    """A door (protocol v1, Wyoming, HTTP …), run by the daemon (appliance.daemon).

    Shutdown order: every door's ``close_listener``, then the core drains in-flight
    streams (ending the rest with ``shutting_down``), then every door's ``wait_idle``
    (what the core has made but the door has still to send, up to the same deadline; the
    rest then ends with ``shutting_down``), then every door's ``close``."""

    name: str

    async def start(self) -> None:
        """Bind and start serving (raise OSError / ValueError when it cannot)."""

    def close_listener(self) -> None:
        """Stop accepting connections; streams in flight go on."""

    async def wait_idle(self, deadline: float) -> None:
        """Return once the door sends nothing more of what the core made (paced output);
        at ``deadline`` (the loop's clock) what it still sends ends with ``shutting_down``
        (told within a second)."""

    async def close(self) -> None:
        """Close what is left (connections, the listener)."""


class DoorBase:
    """The core a door serves and the settings it reads.

    ``stopping`` is the daemon's stop (set by ``close_listener``): a newcomer is told
    ``shutting_down``.  (The core's ``draining`` is the notice before it, while
    everything is still served.)"""

    name: str

    def __init__(self, service: Service) -> None:
        self.service = service
        self.stopping = False

    @property
    def config(self) -> Config:
        """Read on every use: a SIGHUP reload reaches connections already open."""
        return self.service.runtime.config

    @property
    def limits(self) -> LimitsConfig:
        return self.config.limits

    def shutting_down(self) -> ServiceError | None:
        """The refusal of new work while the daemon stops (counted), or None."""
        if not (self.stopping or self.service.stopping):
            return None
        self.service.record_error(ErrorCode.SHUTTING_DOWN)
        return ServiceError(ErrorCode.SHUTTING_DOWN, SHUTTING_DOWN)
