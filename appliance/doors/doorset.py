"""The doors one daemon runs on one core, as one: built from the config, started, and
stopped in the order :class:`~appliance.core.service.Door` states.

Protocol v1 always (on the activated socket when systemd passed one, else on its path),
then HTTP, Wyoming and the agent when the config turns them on, each on the same service.
Lifecycle: :meth:`DoorSet.start` starts them in that order and stops at the first that
cannot listen (one line); :meth:`DoorSet.close_listeners` (the stop begins),
:meth:`DoorSet.wait_idle` (up to the stop's deadline) and :meth:`DoorSet.close` reach
every door built, started or not, so a socket bound before a later door failed is not
left behind.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

from appliance.core.service import Service
from appliance.doors.frame.door import Door
from appliance.ops.config import Config

log = logging.getLogger("ttsd")


def import_doors(cfg: Config) -> None:
    """Import the modules of the doors ``cfg`` turns on (~0.1 s for v1 alone, more with
    aiohttp): the daemon does it in its loading thread while the first packets warm,
    rather than on the loop once they are (issue 42: a short start)."""
    import appliance.doors.v1.server

    if cfg.http.listen:
        import appliance.doors.http
    if cfg.wyoming.uri:
        import appliance.doors.wyoming
    if cfg.agent.listen:
        import appliance.doors.agent  # noqa: F401


class DoorSet:
    """The daemon's doors (see the module)."""

    def __init__(self, doors: list[Door]) -> None:
        self.doors = doors

    @classmethod
    def from_config(
        cls, service: Service, cfg: Config, socket_path: Path, activated: socket.socket | None
    ) -> DoorSet:
        """Protocol v1, then the doors the config turns on (each on the same core)."""
        from appliance.doors.v1.server import V1Door

        doors: list[Door] = [V1Door(service, socket_path, activated)]
        if cfg.http.listen:
            from appliance.doors.http import HttpDoor

            doors.append(HttpDoor(service, cfg.http))
        if cfg.wyoming.uri:
            from appliance.doors.wyoming import WyomingDoor

            for line in wyoming_warnings(cfg):
                log.warning("%s", line)
            doors.append(WyomingDoor(service, cfg.wyoming.uri))
        if cfg.agent.listen:
            from appliance.doors.agent import AgentDoor

            doors.append(AgentDoor(service, cfg.agent))
        return cls(doors)

    async def start(self) -> bool:
        """Every door listening; False (said in one line) when one cannot."""
        try:
            for door in self.doors:
                await door.start()
        except (OSError, ValueError) as exc:
            log.error("cannot listen: %s", exc)
            return False
        return True

    def close_listeners(self) -> None:
        for door in self.doors:
            door.close_listener()

    async def wait_idle(self, deadline: float) -> None:
        """Every door's paced output sent, or ended at ``deadline`` (the loop's clock)."""
        await asyncio.gather(*(door.wait_idle(deadline) for door in self.doors))

    async def close(self) -> None:
        for door in self.doors:
            await door.close()


def wyoming_warnings(cfg: Config) -> list[str]:
    """What the Wyoming settings leave out that was likely meant: a listener other hosts
    can reach while only loopback peers are admitted (``wyoming.allowed_networks``' default),
    and v1's peer settings, which a ``unix://`` socket no longer borrows."""
    from appliance.doors.net import is_loopback, is_loopback_network
    from appliance.ops.config import V1Config, WyomingConfig, wyoming_endpoint

    w = cfg.wyoming
    if not w.uri:
        return []
    kind, host, _port = wyoming_endpoint(w.uri)
    if kind == "tcp":
        if is_loopback(host) or not all(is_loopback_network(n) for n in w.allowed_networks):
            return []
        return [
            f"wyoming: {w.uri} is open to other hosts, but wyoming.allowed_networks"
            f" ({', '.join(w.allowed_networks)}) admits only this host: Home Assistant on"
            " another host is refused; name its network there or with --wyoming-allow NETWORK"
        ]
    peers = ("socket_mode", "allowed_uids", "allowed_gids")
    own, v1 = WyomingConfig(), V1Config()
    if all(getattr(w, k) == getattr(own, k) for k in peers) and any(
        getattr(cfg.v1, k) != getattr(v1, k) for k in peers
    ):
        return [
            "wyoming: the unix socket's mode and peers are wyoming.socket_mode,"
            " wyoming.allowed_uids and wyoming.allowed_gids (v1's settings no longer apply)"
        ]
    return []
