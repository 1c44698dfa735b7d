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

Lifecycle: ``start`` binds; ``close_listener`` (the daemon's drain) keeps answering —
``up drain`` from then on — so the balancer reads the drain rather than a refused
connection, which it would not count as one; ``close`` shuts the listener and its
connections.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging

from appliance.core.capacity import Capacity, capacity_of
from appliance.core.service import Service
from appliance.doors.net import (
    drop_connection,
    fds_short,
    is_loopback,
    is_loopback_network,
    parse_listen,
    peer_ip,
    quiet_accept_errors,
    read_to_eof,
    refuse,
)
from appliance.ops.config import AgentConfig
from appliance.ops.logsetup import Throttle

log = logging.getLogger(__name__)

DOOR = "agent"
_READ_LIMIT = 1024
"""The reader's buffer: what a balancer's ``agent-send`` may leave before it is dropped."""
_THROTTLE = Throttle()


class AgentDoor:
    name = DOOR

    def __init__(self, service: Service, cfg: AgentConfig) -> None:
        self.service = service
        self.cfg = cfg
        self.port: int | None = None
        self.draining = False
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()
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
        loop = asyncio.get_running_loop()
        quiet_accept_errors(loop)
        self._server = await asyncio.start_server(
            self._accept, host, port, limit=_READ_LIMIT, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        self.service.add_door(DOOR, lambda: len(self._open))
        log.info("agent: answering HAProxy agent checks on %s:%d", host, self.port)

    async def wait_idle(self, deadline: float) -> None:
        """Nothing outlives the core's streams here: a connection's output is its own."""

    def close_listener(self) -> None:
        self.draining = True  # keep answering: "up drain" while the core drains

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._open):
            task.cancel()
        if self._open:
            await asyncio.wait(list(self._open), timeout=2.0)

    # ------------------------------------------------------------ one check

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if not self._admit(writer):
            drop_connection(writer.transport)
            return
        self._open.add(task)
        closed = asyncio.ensure_future(read_to_eof(reader))
        try:
            async with asyncio.timeout(self.cfg.timeout_s):
                line = self.answer().encode("ascii")
                await refuse(writer.transport, line, closed, linger_s=self.cfg.timeout_s)
        except (TimeoutError, ConnectionError, OSError):
            drop_connection(writer.transport)
        except Exception as exc:  # a bug: this check goes unanswered, the door goes on
            _THROTTLE.log(log, logging.ERROR, "agent", "agent: check failed: %s", exc, exc_info=exc)
            drop_connection(writer.transport)
        finally:
            closed.cancel()
            self._open.discard(task)

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Room, a descriptor to spare, and a peer in ``allowed_networks``."""
        if len(self._open) >= self.cfg.max_connections:
            return False
        limits = self.service.runtime.config.limits
        if fds_short(writer.get_extra_info("socket"), limits.reserved_fds):
            return False
        ip = peer_ip(writer.get_extra_info("peername"))
        return ip is not None and any(ip in net for net in self._networks)

    def answer(self) -> str:
        """This box's line now; ``up drain`` once the daemon drains, whatever the load."""
        cap = capacity_of(self.service)
        if self.draining and cap.state == "ready":
            cap = Capacity("drain", reason="stopping")
        return cap.agent_line()
