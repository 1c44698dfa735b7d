"""Protocol v1's door on the frame: where it listens, who may connect, and the speech that
outlives its clients.

What it adds to :class:`~appliance.doors.frame.listener.StreamDoor`:

- **Where**: a Unix socket at the daemon's socket path (its directory made as the
  per-user default wants it, the socket with ``v1.socket_mode``), or one systemd passed
  in (``ttsd.socket``).
- **Who**: the peer's credentials (root, the daemon's user, ``v1.allowed_uids`` and
  ``allowed_gids``, the socket's group); its slots are counted by uid, and its uid is
  whose speech ``stop`` silences.
- **Each connection**: :class:`~appliance.doors.v1.connection.V1Protocol` (framing,
  messages, requests).
- **Speech that outlives its client** (:meth:`V1Door.detach`): a ``speak`` plays on after
  its client has gone, at most ``limits.max_inflight_per_connection`` per user; ``close``
  waits for it as for the connections.
- **The stop**: ``close_listener`` keeps a socket it made open (a newcomer is told
  ``shutting_down``); an activated one is no longer accepted on: systemd holds it, so a
  newcomer waits in its backlog for the next daemon, which serves it.

Connection limits, timeouts, the output bound, ``client_too_slow``, refusals,
``wait_idle`` (paced frames until the drain's deadline) and ``close`` (the socket file
removed only if it is still its own) are the frame's.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from appliance.core.service import Service
from appliance.doors.frame.listener import Admitted, StreamDoor, admit_unix_peer
from appliance.doors.frame.session import Session, StreamChannel, WireProtocol
from appliance.doors.net import peer_of
from appliance.doors.v1.bodies import DOOR
from appliance.doors.v1.connection import V1Protocol
from appliance.errors import ServiceError
from appliance.ops.paths import prepare_socket_dir

__all__ = ["V1Door"]

log = logging.getLogger(__name__)


class V1Door(StreamDoor):
    """Protocol v1 on the daemon's Unix socket, on the shared service core."""

    name = DOOR

    def __init__(
        self, service: Service, socket_path: Path, activated: socket.socket | None = None
    ) -> None:
        super().__init__(service, log)
        self.socket_path = socket_path
        self._activated = activated
        self.detached: dict[Hashable, set[asyncio.Task[None]]] = {}
        """``speak`` requests whose client has gone, by user: they play on (bounded)."""

    # ------------------------------------------------------------ the frame's hooks

    def protocol(self, session: Session) -> WireProtocol[Any]:
        channel = session.channel
        assert isinstance(channel, StreamChannel)
        return V1Protocol(session, self, channel.reader)

    async def admit(self, writer: asyncio.StreamWriter) -> Admitted | ServiceError:
        # peer_of looked up here, at the call: a test may stand in for the kernel's answer.
        return await admit_unix_peer(writer, self.config.v1, self.socket_gid, who=peer_of)

    def outliving(self) -> list[asyncio.Task[None]]:
        return [t for held in self.detached.values() for t in held]

    # ------------------------------------------------------------ life

    async def start(self) -> None:
        if self._activated is not None:
            await self.listen_activated(self._activated)
            log.info("serving on an activated socket")
            return
        prepare_socket_dir(self.socket_path)  # the per-user default: 0700, ours, not a symlink
        mode = self.config.v1.socket_mode
        await self.listen_unix(self.socket_path, mode)
        log.info("listening on %s (mode %o)", self.socket_path, mode)

    def close_listener(self) -> None:
        """The drain begins (see the module doc: an activated socket is left to systemd)."""
        super().close_listener()
        if self._activated is not None and self._server is not None:
            self._server.close()

    async def serve_stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One connection made elsewhere (``ttsctl --local``'s socketpair), gated and
        served as if it had come through the listener."""
        await self._accept(reader, writer)

    def detach(self, key: Hashable, task: asyncio.Task[None]) -> bool:
        """Let a ``speak`` request play on after its client has gone; False when this user
        already has ``max_inflight_per_connection`` such requests (it is then cancelled, so
        connecting, queueing and leaving in a loop cannot pile up speech without bound)."""
        held = self.detached.setdefault(key, set())
        if len(held) >= self.limits.max_inflight_per_connection:
            return False
        held.add(task)

        def done(t: asyncio.Task[None]) -> None:
            held.discard(t)
            if not held and self.detached.get(key) is held:
                del self.detached[key]

        task.add_done_callback(done)
        return True
