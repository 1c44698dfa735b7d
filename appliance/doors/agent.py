"""The agent door: HAProxy's ``agent-check``, so a balancer routes new work by this box's
room (docs/scale-out.md).

HAProxy connects to ``agent.listen``, reads one line and closes; the door writes
:meth:`~appliance.core.capacity.Capacity.agent_line` at once — ``up ready 57%
maxconn:6``, ``up drain`` (full, starting or stopping) or ``down#reason`` — shuts its
writing side and reads (and drops) whatever the balancer sends (``agent-send``) until it
closes.  Nothing a client sends is parsed or kept.

Bounds, as every door's (:mod:`appliance.doors.net`): ``agent.max_connections`` at once
(beyond, a newcomer is closed at once), each one's whole life within ``agent.timeout_s``,
input dropped as read through a small reader (its buffer is the only memory a client
holds), one line of output, descriptors left for the Unix socket (``limits.reserved_fds``).

Who may ask: the peer's address must be in ``agent.allowed_networks`` (loopback by
default); others are closed unanswered.  The agent protocol cannot carry a key, so the
HTTP door's rule (a key off loopback) becomes: listening off loopback needs an
allow-list that names more than loopback, else the door refuses to start.

What it adds to the door frame (:class:`~appliance.doors.frame.listener.StreamDoor`:
the listener, the gate, the connection's life and close): its answer, its own room
(``agent.max_connections``, no slots kept for anyone), refusals without a word (a
balancer reads no error), and its stop: ``close_listener`` (the daemon's drain) keeps
answering — ``up drain`` from then on — so the balancer reads the drain rather than a
refused connection, which it would not count as one; ``close`` shuts the listener and
its connections.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Hashable
from typing import Any

from appliance.core.capacity import Capacity, capacity_of
from appliance.core.service import Service
from appliance.doors.frame.listener import Admitted, StreamDoor
from appliance.doors.frame.session import Session, StreamChannel, WireProtocol
from appliance.doors.net import (
    fds_short,
    is_loopback,
    is_loopback_network,
    parse_listen,
    peer_ip,
    read_to_eof,
    refuse,
)
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import AgentConfig

log = logging.getLogger(__name__)

DOOR = "agent"
_READ_LIMIT = 1024
"""The reader's buffer: what a balancer's ``agent-send`` may leave before it is dropped."""


class AgentDoor(StreamDoor):
    name = DOOR

    def __init__(self, service: Service, cfg: AgentConfig) -> None:
        super().__init__(service, log)
        self.cfg = cfg
        self.port: int | None = None
        self._networks = [ipaddress.ip_network(n, strict=False) for n in cfg.allowed_networks]

    async def start(self) -> None:
        if not self.cfg.listen:
            raise ValueError("agent: no listen address")
        host, port = parse_listen(self.cfg.listen, "agent.listen")
        if not is_loopback(host) and all(is_loopback_network(n) for n in self.cfg.allowed_networks):
            raise ValueError(
                f"agent: refusing to listen on {self.cfg.listen} for loopback peers only:"
                " name the balancers' addresses in agent.allowed_networks (the agent"
                " protocol carries no key), or listen on 127.0.0.1"
            )
        self.port = await self.listen_tcp(host, port)
        log.info("agent: answering HAProxy agent checks on %s:%d", host, self.port)

    # ------------------------------------------------------------ the frame's hooks

    def protocol(self, session: Session) -> WireProtocol[Any]:
        return _Check(session, self)

    def reader(self) -> asyncio.StreamReader:
        return asyncio.StreamReader(limit=_READ_LIMIT)

    async def admit(self, writer: asyncio.StreamWriter) -> Admitted | ServiceError:
        """A descriptor to spare, and a peer in ``allowed_networks``."""
        if fds_short(writer.get_extra_info("socket"), self.limits.reserved_fds):
            return ServiceError(ErrorCode.TOO_MANY_CONNECTIONS, "file descriptors are short")
        ip = peer_ip(writer.get_extra_info("peername"))
        if ip is None or not any(ip in net for net in self._networks):
            return ServiceError(ErrorCode.UNAUTHORIZED, f"{ip} is not in agent.allowed_networks")
        return Admitted(("host", str(ip)))

    def take_slot(self, admitted: Admitted) -> ServiceError | None:
        if len(self.sessions) >= self.cfg.max_connections:
            return ServiceError(ErrorCode.TOO_MANY_CONNECTIONS, "agent.max_connections")
        return None

    def give_back_slot(self, admitted: Admitted) -> None:
        """No slots are held: the room is the sessions open."""

    async def refuse(self, session: Session, exc: ServiceError) -> None:
        """Closed unanswered: a balancer reads no errors, only a line or nothing."""
        session.outbox.drop()

    def shutting_down(self) -> ServiceError | None:
        """Never: while the daemon stops, a check is answered ``up drain``."""
        return None

    def answer(self) -> str:
        """This box's line now; ``up drain`` once the daemon drains, whatever the load."""
        cap = capacity_of(self.service)
        if self.stopping and cap.state == "ready":
            cap = Capacity("drain", reason="stopping")
        return cap.agent_line()


class _Check(WireProtocol[bytes]):
    """One check: the line, the writing side shut, and what the balancer sends dropped
    until it closes, all within ``agent.timeout_s`` (then the connection is dropped).
    Nothing read is a message: the one read is the whole exchange."""

    def __init__(self, session: Session, door: AgentDoor) -> None:
        super().__init__(session)
        self.door = door

    async def read(self) -> bytes | None:
        channel = self.session.channel
        assert isinstance(channel, StreamChannel)
        if channel.is_closing():
            return None
        line = self.door.answer().encode("ascii")
        timeout_s = self.door.cfg.timeout_s
        await refuse(channel.transport, line, read_to_eof(channel.reader), linger_s=timeout_s)
        return None

    @property
    def partial(self) -> bool:
        return False

    async def dispatch(self, msg: bytes) -> None:
        """Never called: the read answers None."""

    def error_bytes(self, key: Hashable, exc: ServiceError) -> bytes:
        return b""  # the agent protocol has no errors: a failed check closes unanswered

    def eof_is_disconnect(self) -> bool:
        return True
