"""A door on a stream socket: the listener, the gate in front of each connection, and
the door's side of the daemon's stop (protocol v1, Wyoming and the agent stand on it).

- **Listen** on a Unix socket (made owner-only, then opened up to its mode; a stale one
  replaced, a live one never), on one systemd passed in, or on TCP.
- **Gate**, for each connection, in this order: the door's :meth:`StreamDoor.admit` (who
  may connect: a Unix socket's peer, a TCP peer's address, descriptors to spare), a slot
  (:class:`~appliance.doors.net.ClientSlots`), and not stopping.  A refusal is counted,
  answered with the door's error (``unauthorized``, ``too_many_connections[_for_user]``,
  ``shutting_down``) and closed once the client has read it; a connection refused while
  the daemon stops holds its slot while it lingers, so a flood stays bounded.
- **Serve**: a :class:`~appliance.doors.frame.session.Session` with the door's protocol.
  A bug in one connection is logged and closes that connection only.
- **Stop**: ``close_listener`` (the drain begins: the listener stays open so a newcomer
  is told ``shutting_down`` rather than refused by the kernel), ``wait_idle`` (paced
  frames still on the clock go out until the drain's deadline, then end with
  ``shutting_down``), ``close`` (the listener, the connections left — waited for at most
  2 s — and the socket file it made, only if it is still its own).
"""

from __future__ import annotations

import abc
import asyncio
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.service import Service
from appliance.doors.frame.door import DoorBase
from appliance.doors.frame.ending import Report
from appliance.doors.frame.session import Session, StreamChannel, WireProtocol
from appliance.doors.net import (
    ClientSlots,
    Peer,
    authorize_peer,
    bind_unix_socket,
    fds_short,
    peer_ip,
    peer_of,
    privileged,
    quiet_accept_errors,
    raise_fd_limit,
    remove_own_socket,
)
from appliance.doors.pace import PacedSends
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import V1Config, WyomingConfig

_READ_SIZE = 65536
"""A connection's reader buffers at most this much (a door may bound it tighter)."""
_CLOSE_WAIT_S = 2.0


@dataclass(frozen=True)
class Admitted:
    """Who a connection is: the key its slots are counted by (a uid, a host), and
    whether it may use the slots kept for root and the daemon's user."""

    client: Hashable
    privileged: bool = False


async def admit_unix_peer(
    writer: asyncio.StreamWriter,
    cfg: V1Config | WyomingConfig,
    socket_gid: int | None,
    who: Callable[[socket.socket], Peer | None] = peer_of,
) -> Admitted | ServiceError:
    """A Unix socket's peer, by its credentials (``who``: :func:`~appliance.doors.net.peer_of`,
    and :func:`~appliance.doors.net.authorize_peer`)."""
    sock = writer.get_extra_info("socket")
    peer = who(sock) if sock is not None else None
    reason = await authorize_peer(peer, cfg, socket_gid)
    if reason is not None or peer is None:
        return ServiceError(ErrorCode.UNAUTHORIZED, reason or "peer credentials unavailable")
    return Admitted(("uid", peer.uid), privileged(peer))


def admit_tcp_peer(
    writer: asyncio.StreamWriter, networks: tuple[str, ...], reserved_fds: int
) -> Admitted | ServiceError:
    """A TCP peer: a descriptor to spare (those kept for the Unix socket's reserved
    connections stay free), and an address in ``networks``."""
    if fds_short(writer.get_extra_info("socket"), reserved_fds):
        return ServiceError(ErrorCode.TOO_MANY_CONNECTIONS, "file descriptors are short")
    ip = peer_ip(writer.get_extra_info("peername"))
    if ip is None:
        return ServiceError(ErrorCode.UNAUTHORIZED, "peer address unavailable")
    if not any(ip in ipaddress.ip_network(n, strict=False) for n in networks):
        return ServiceError(ErrorCode.UNAUTHORIZED, f"{ip} is not in allowed_networks")
    return Admitted(("host", str(ip)))


class StreamDoor(DoorBase, abc.ABC):
    """A listener whose connections each run a :class:`Session` (see the module doc)."""

    def __init__(self, service: Service, logger: logging.Logger) -> None:
        super().__init__(service)
        self.report = Report(service.record_error, logger, self.name)
        self.sessions: set[Session] = set()
        self.slots = ClientSlots()
        self.paced = PacedSends()
        """Paced requests whose frames are still on the clock (the drain waits for them)."""
        self.socket_gid: int | None = None
        """The group of the Unix socket's file (its members may connect)."""
        self._server: asyncio.AbstractServer | None = None
        self._own_socket: tuple[Path, tuple[int, int]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._seq = 0
        service.add_door(self.name, lambda: len(self.sessions))

    # ------------------------------------------------------------ what a door gives

    @abc.abstractmethod
    def protocol(self, session: Session) -> WireProtocol[Any]:
        """The door's framing and dispatch for one connection."""

    @abc.abstractmethod
    async def admit(self, writer: asyncio.StreamWriter) -> Admitted | ServiceError:
        """Who the peer is, or why it may not connect."""

    def reader(self) -> asyncio.StreamReader:
        """A connection's reader (a door may bound what it buffers)."""
        return asyncio.StreamReader(limit=_READ_SIZE)

    async def closing(self) -> None:
        """What the door closes besides its connections (an mDNS record)."""

    # ------------------------------------------------------------ listening

    def _protocol_factory(self) -> asyncio.StreamReaderProtocol:
        return asyncio.StreamReaderProtocol(self.reader(), self._accept)

    async def listen_unix(self, path: Path, mode: int) -> None:
        """Listen on ``path``, made owner-only then opened up to ``mode``."""
        loop = asyncio.get_running_loop()
        self._prepare(loop)
        self._server, st = await bind_unix_socket(
            path, mode, lambda p: loop.create_unix_server(self._protocol_factory, p)
        )
        self.socket_gid = st.st_gid
        self._own_socket = (path, (st.st_dev, st.st_ino))

    async def listen_activated(self, sock: socket.socket) -> None:
        """Serve on a socket systemd passed in (its group's members may connect)."""
        loop = asyncio.get_running_loop()
        self._prepare(loop)
        sock.setblocking(False)
        self._server = await loop.create_unix_server(self._protocol_factory, sock=sock)
        try:
            self.socket_gid = os.fstat(sock.fileno()).st_gid
            name = sock.getsockname()
            if isinstance(name, str) and name:
                self.socket_gid = os.stat(name).st_gid
        except OSError:
            pass  # no group to admit by: root, the daemon's user and the allow-lists still are

    async def listen_tcp(self, host: str, port: int) -> int:
        """Listen on ``host:port``; the port bound (0 means any)."""
        loop = asyncio.get_running_loop()
        self._prepare(loop)
        self._server = await loop.create_server(self._protocol_factory, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    def _prepare(self, loop: asyncio.AbstractEventLoop) -> None:
        quiet_accept_errors(loop)
        raise_fd_limit(self.config)

    # ------------------------------------------------------------ connections

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._seq += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        session = Session(
            StreamChannel(reader, writer),
            lambda: self.limits,
            self.report,
            self._seq,
            self.protocol,
        )
        try:
            await self._gate(session, writer)
        except Exception:  # the listener's boundary: a bug closes one connection, not the door
            self.report.log.exception("%s %s failed", self.name, session.whose)
            session.leave()
            session.close()

    async def _gate(self, session: Session, writer: asyncio.StreamWriter) -> None:
        """Admit (or refuse) the connection, then serve it; its slot back at the end."""
        admitted = await self.admit(writer)
        if isinstance(admitted, ServiceError):
            self.report.throttled(
                logging.WARNING, "refused", "%s: refused a connection: %s", self.name,
                admitted.message,
            )  # fmt: skip
            await self.refuse(session, admitted)
            return
        session.client = admitted.client
        refused = self.take_slot(admitted)
        if refused is not None:
            await self.refuse(session, refused)
            return
        held = [session]

        def release() -> None:
            """Not counted, its slot back: once the client is gone, not once its work has
            wound down (a client that reconnects at once finds its slot)."""
            if held:
                held.clear()
                self.sessions.discard(session)
                self.give_back_slot(admitted)

        try:
            stop = self.shutting_down()
            if stop is not None:  # holding its slot while it lingers: a flood stays bounded
                await session.refuse(stop)
                return
            self.sessions.add(session)
            await session.serve(release)
        finally:
            release()

    def take_slot(self, admitted: Admitted) -> ServiceError | None:
        """A slot for the connection (``limits.max_connections``, less those kept for root
        and the daemon's user; ``limits.max_connections_per_uid`` each), or why not."""
        return self.slots.admit(
            self.limits, len(self.sessions), admitted.client, admitted.privileged
        )

    def give_back_slot(self, admitted: Admitted) -> None:
        self.slots.give_back(admitted.client)

    async def refuse(self, session: Session, exc: ServiceError) -> None:
        """A refused connection: counted, told why, closed once it has read it."""
        self.report.count(exc.code)
        await session.refuse(exc)

    # ------------------------------------------------------------ the daemon's stop

    def close_listener(self) -> None:
        """The drain begins: newcomers are told ``shutting_down``; :meth:`close` shuts the
        listener."""
        self.stopping = True

    async def wait_idle(self, deadline: float) -> None:
        """Paced frames outlive the core's stream: they go out until ``deadline``, then
        each request still sending ends with ``shutting_down``."""
        for _ in range(await self.paced.drain(deadline)):
            self.service.record_error(ErrorCode.SHUTTING_DOWN)

    async def close(self) -> None:
        """The listener, the connections left, and the socket file it made if it is still
        its own (a daemon started after it may have replaced it)."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        await self.closing()
        for s in list(self.sessions):
            s.leave()
            s.close()
        waiting = [*self._tasks, *self.outliving()]
        if waiting:
            await asyncio.wait(waiting, timeout=_CLOSE_WAIT_S)
        if self._own_socket is not None:
            try:
                remove_own_socket(*self._own_socket)
            except OSError as exc:
                self.report.log.warning(
                    "%s: cannot remove %s: %s", self.name, self._own_socket[0], exc
                )
            self._own_socket = None

    def outliving(self) -> list[asyncio.Task[None]]:
        """Work that outlives its connection (v1's ``speak``): waited for at close."""
        return []
