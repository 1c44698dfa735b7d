"""The Wyoming door on the frame: where it listens, who may connect, and its mDNS record.

What it adds to :class:`~appliance.doors.frame.listener.StreamDoor`:

- **Where**: ``wyoming.uri``: ``tcp://HOST:PORT`` (port 0: any; the log says which) or
  ``unix://PATH`` (made with ``wyoming.socket_mode``).
- **Who**: peers of a ``unix://`` socket are checked as protocol v1's are (their
  credentials, ``wyoming.allowed_uids``/``allowed_gids``, the socket's group);
  ``tcp://`` peers must come from ``wyoming.allowed_networks`` (Wyoming has no
  authentication: a warning names networks beyond loopback) and leave descriptors for
  the Unix socket's reserved connections.
- **Reads** through :class:`~appliance.doors.wyoming.events.BoundedReader`: what a client
  can make it hold is ``limits.max_message_bytes``.
- **mDNS** (``wyoming.zeroconf``, ``tcp://`` only): advertised after start, withdrawn at
  close.

Connection limits, timeouts, the output bound, ``client_too_slow``, refusal while the
daemon stops (``error`` ``shutting_down``, then the close) and shutdown are the frame's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.core.service import Service
from appliance.doors.frame.listener import Admitted, StreamDoor, admit_tcp_peer, admit_unix_peer
from appliance.doors.frame.session import Session, WireProtocol
from appliance.doors.net import is_loopback_network
from appliance.doors.wyoming.events import BoundedReader
from appliance.doors.wyoming.protocol import WyomingProtocol
from appliance.doors.wyoming.zeroconf import advertise
from appliance.errors import ServiceError
from appliance.ops.config import WyomingConfig, wyoming_endpoint

if TYPE_CHECKING:
    from zeroconf.asyncio import AsyncZeroconf

log = logging.getLogger("appliance.doors.wyoming")


class WyomingDoor(StreamDoor):
    """A Wyoming server on ``wyoming.uri``, on the shared service core."""

    name = "wyoming"

    def __init__(self, service: Service, uri: str) -> None:
        super().__init__(service, log)
        self.kind, self.host, self.port = wyoming_endpoint(uri)
        self._zeroconf: AsyncZeroconf | None = None

    @property
    def wcfg(self) -> WyomingConfig:
        return self.config.wyoming

    @property
    def uri(self) -> str:
        if self.kind == "unix":
            return f"unix://{self.host}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"

    # ------------------------------------------------------------ the frame's hooks

    def protocol(self, session: Session) -> WireProtocol[Any]:
        return WyomingProtocol(session, self.service)

    def reader(self) -> asyncio.StreamReader:
        return BoundedReader(self.limits.max_message_bytes)

    async def admit(self, writer: asyncio.StreamWriter) -> Admitted | ServiceError:
        if self.kind == "unix":
            return await admit_unix_peer(writer, self.wcfg, self.socket_gid)
        return admit_tcp_peer(writer, self.wcfg.allowed_networks, self.limits.reserved_fds)

    async def closing(self) -> None:
        if self._zeroconf is not None:
            with contextlib.suppress(Exception):  # mDNS at exit: nothing left to tell anyone
                await self._zeroconf.async_close()
            self._zeroconf = None

    # ------------------------------------------------------------ life

    async def start(self) -> None:
        if self.kind == "tcp":
            self.port = await self.listen_tcp(self.host, self.port)
            if not all(is_loopback_network(n) for n in self.wcfg.allowed_networks):
                log.warning(
                    "wyoming: clients from %s may connect; Wyoming has no authentication",
                    ", ".join(self.wcfg.allowed_networks),
                )
        else:
            path = Path(self.host)
            path.parent.mkdir(parents=True, exist_ok=True)
            await self.listen_unix(path, self.wcfg.socket_mode)
        log.info("wyoming: listening on %s", self.uri)
        if not self.wcfg.zeroconf:
            return
        if self.kind != "tcp":
            log.warning("wyoming.zeroconf: only a tcp:// listener can be advertised")
            return
        name = self.wcfg.zeroconf_name or f"ttsd-{socket.gethostname()}"[:63]
        self._zeroconf = await advertise(self.host, self.port, name)
