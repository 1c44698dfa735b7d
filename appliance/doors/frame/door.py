"""What every door stands on (:class:`DoorBase`): the core it serves and its settings.

What the daemon runs is :class:`appliance.core.service.Door` (its start, stop and close);
a door on the frame is one.

Settings come from one place: :attr:`DoorBase.config` is the daemon's one config (the
runtime's, where a SIGHUP puts its live changes), read on every use; no door keeps a
copy from start-up.
"""

from __future__ import annotations

from appliance.core.service import Service
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config, LimitsConfig

SHUTTING_DOWN = "the daemon is shutting down"


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
