"""The connection policy every door shares, below all of them (uvicorn keeps such code
below its protocols too): who may connect and how many, how long a connection may be
idle or send half a message, how much output it may hold and how slow a reader may be,
and how a refused or cut-off connection is told and closed.  A door keeps only its
framing and dispatch.

- **Peers**: a Unix socket's peer credentials (``SO_PEERCRED``, groups from
  ``SO_PEERGROUPS``) and the one rule for who may connect (:func:`authorize_peer`).
- **Sockets**: binding a Unix socket owner-only then opening it up, replacing only a
  stale one, removing only our own.
- **Slots** (:class:`ClientSlots`): ``limits.max_connections`` less the
  ``reserved_connections`` kept for root and the daemon's user, and
  ``max_connections_per_uid`` for any one client (a uid, a host); file descriptors kept
  for them (``reserved_fds``).
- **Reads** (:class:`ReadTimer`): a connection idle for ``idle_timeout_s`` is closed, a
  message begun and not finished within ``frame_timeout_s`` is refused.
- **Output** (:class:`Outbox`): held under ``max_output_buffer_bytes`` in the transport and
  in the kernel; past it the door stops reading, and a client that reads nothing for
  ``client_too_slow_s`` *plus the audio it already holds* is cut off
  (:class:`ClientTooSlow`) and reset, not left retransmitting.  A client reading steadily
  at real time is never cut off, however slowly it reads.
- **Addresses** (TCP doors): ``HOST:PORT`` parsed once (:func:`parse_listen`), what counts
  as loopback (:func:`is_loopback`, :func:`is_loopback_network`), a peer's address in the
  allow-lists (:func:`peer_ip`).
- **Refusal** (:func:`refuse`): the answer, the writing side shut, the connection closed
  when the client has read it (or after a second), so it sees why.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import pwd
import resource
import select
import socket
import stat
import struct
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config, LimitsConfig, V1Config, WyomingConfig
from appliance.ops.logsetup import Throttle

log = logging.getLogger(__name__)

_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux ≥ 4.13
_MAX_GROUPS = 65536
_POLL_S = 0.25
"""How often a waiting write looks whether the client read anything."""
LINGER_S = 1.0
"""How long a refused connection is kept for the client to read why."""

T = TypeVar("T")


class ClientTooSlow(Exception):
    """The client read nothing of its output for ``client_too_slow_s`` beyond the audio it
    already held (see :class:`Outbox`): the one too-slow rule of every door."""

    code = ErrorCode.CLIENT_TOO_SLOW


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: frozenset[int] | None = None
    """Supplementary groups of the peer process itself (SO_PEERGROUPS), when known."""


def peer_of(sock: socket.socket) -> Peer | None:
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid, _peer_groups(sock))


def _peer_groups(sock: socket.socket) -> frozenset[int] | None:
    """The groups the peer process holds, from the kernel: not the user database, which
    can say more (groups gained since login) or less (a process that dropped some)."""
    size = 4 * 64
    while size <= 4 * _MAX_GROUPS:
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, size)
        except OSError as exc:
            if exc.errno == errno.ERANGE:
                size *= 4
                continue
            return None
        groups = array.array("I")
        groups.frombytes(raw[: len(raw) - len(raw) % 4])
        return frozenset(groups)
    return None


def _user_groups(uid: int, gid: int) -> set[int]:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return {gid}
    return set(os.getgrouplist(name, gid))


def peer_hung_up(sock: socket.socket) -> bool:
    """The client closed both directions (POLLHUP), not only its writing side; also when
    the socket is closed already (a write to the gone client failed: its descriptor is -1)."""
    fd = sock.fileno()
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLHUP | select.POLLERR)
    try:
        return any(ev & (select.POLLHUP | select.POLLERR) for _fd, ev in poller.poll(0))
    except OSError:
        return True


def remove_stale_socket(path: Path) -> None:
    """Replace a socket file left by a crash; refuse to touch one a daemon may use.

    Only "connection refused" proves no one listens.  Anything else (EAGAIN from a
    full accept queue, a timeout, a permission error) may be a live daemon."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        log.warning("removing stale socket %s", path)
        path.unlink(missing_ok=True)
        return
    except OSError as exc:
        raise OSError(
            errno.EADDRINUSE,
            f"{path} may belong to a running daemon (probe: {exc.strerror or exc});"
            " not replacing it",
        ) from exc
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"another daemon is serving on {path}")


async def authorize_peer(
    peer: Peer | None, cfg: V1Config | WyomingConfig, socket_gid: int | None
) -> str | None:
    """None if the peer of a Unix socket whose file has group ``socket_gid`` may connect,
    else the reason it may not (every Unix-socket door applies the same rule)."""
    if peer is None:
        return "peer credentials unavailable"
    if peer.uid in (0, os.getuid()) or peer.uid in cfg.allowed_uids:
        return None
    if peer.gid in cfg.allowed_gids or peer.gid == socket_gid:
        return None
    groups: set[int]
    if peer.groups is not None:
        groups = set(peer.groups)
    else:
        loop = asyncio.get_running_loop()
        groups = await loop.run_in_executor(None, _user_groups, peer.uid, peer.gid)
    if socket_gid in groups or groups & set(cfg.allowed_gids):
        return None
    return f"uid {peer.uid} is not allowed"


def privileged(peer: Peer | None) -> bool:
    """Root and the daemon's own user: they keep a few connection slots to themselves."""
    return peer is not None and peer.uid in (0, os.getuid())


def bound_kernel_send_buffer(transport: asyncio.BaseTransport | None, limit: int) -> None:
    """Hold a connection's unsent bytes under ``limit`` in the kernel too, not only in
    the transport.  Autotuning lets a socket's send buffer grow to megabytes: output that a
    client which stopped reading would count as delivered, so back-pressure (and with it
    ``client_too_slow``) would not start until megabytes later, or, while the client sends
    slowly, never."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, limit)


def drop_connection(transport: asyncio.WriteTransport) -> None:
    """Close now and discard what the client has not read.  ``abort`` alone leaves a TCP
    socket's queued bytes to be flushed after the close (FIN-WAIT-1, retransmitting to a
    client that does not read, for minutes); a zero linger time resets the connection, so
    the kernel memory is freed and the client learns at once that it was dropped."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


REFUSING_FDS = 32
"""Refused TCP connections a door keeps open at once (each answered, then closed within a
second): beyond, a newcomer is closed at once."""

_OWN_FDS = 64
"""The daemon's descriptors besides its connections: listeners, the event loop's, the log,
sd_notify, the sound server, ONNX Runtime's, voice files while they load (15 when idle,
measured; the rest is room)."""

_ACCEPT_LOG = Throttle()
_quiet_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def fds_needed(cfg: Config) -> int:
    """File descriptors the configured limits can take at once: the daemon's own, each
    door's connections (Wyoming is capped by ``limits.max_connections`` as v1 is), the
    HTTP door's refusals in progress, and the reserve the TCP doors leave free."""
    s = cfg.limits
    need = _OWN_FDS + s.reserved_fds + s.max_connections
    if cfg.wyoming.uri:
        need += s.max_connections
    if cfg.http.listen:
        need += cfg.http.max_connections + REFUSING_FDS
    if cfg.agent.listen:
        need += cfg.agent.max_connections
    return need


def raise_fd_limit(cfg: Config) -> int:
    """Raise the soft limit on open files to what the limits need (never past the hard
    limit, which only root can raise: the unit's ``LimitNOFILE``); a warning says what
    is missing.  Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = fds_needed(cfg)
    if soft >= need:
        return soft
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if target > soft:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft < need:
        log.warning(
            "open files: the connection limits need %d descriptors (see docs/service.md,"
            ' "File descriptors"), the limit is %d: raise LimitNOFILE or lower'
            " limits.max_connections / http.max_connections; TCP doors keep %d free",
            need,
            soft,
            cfg.limits.reserved_fds,
        )
    return soft


def fds_short(sock: socket.socket | None, reserve: int) -> bool:
    """Whether keeping ``sock`` (just accepted) leaves fewer than ``reserve`` descriptors
    free.  The kernel hands out the lowest free descriptor, so a new one this near the
    limit means those below it are taken: O(1), no walk of /proc/self/fd."""
    if sock is None or reserve <= 0:
        return False
    return sock.fileno() >= resource.getrlimit(resource.RLIMIT_NOFILE)[0] - reserve


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Out of file descriptors, asyncio logs a traceback for every failed ``accept()``
    (Python 3.11 retries once per waiting connection: thousands of tracebacks a second);
    make that one line every 10 s.  Every other loop error goes where it went."""
    if loop in _quiet_loops:
        return
    _quiet_loops.add(loop)
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == "socket.accept() out of system resource":
            _ACCEPT_LOG.log(
                log,
                logging.WARNING,
                "accept",
                "accept: %s: new connections wait (see LimitNOFILE in docs/service.md)",
                context.get("exception"),
            )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


async def bind_unix_socket(
    path: Path, mode: int, start: Callable[[str], Awaitable[asyncio.AbstractServer]]
) -> tuple[asyncio.AbstractServer, os.stat_result]:
    """Listen on ``path`` (``start(path)`` makes the server), replacing only a stale socket.

    Created owner-only, then opened up to ``mode``: no window in which the socket is
    reachable by anyone else.  Returns the server and the socket file's stat (its group
    for the peer check, its device and inode for :func:`remove_own_socket`)."""
    remove_stale_socket(path)
    old = os.umask(0o177)
    try:
        server = await start(str(path))
    finally:
        os.umask(old)
    os.chmod(path, mode)
    return server, os.stat(path)


def remove_own_socket(path: Path, socket_id: tuple[int, int]) -> None:
    """Remove the socket file only if it is still the one we bound (device, inode): a
    daemon started after us may have replaced it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if (st.st_dev, st.st_ino) == socket_id:
        path.unlink(missing_ok=True)
    else:
        log.warning("%s is no longer our socket; leaving it", path)


# ---------------------------------------------------------------- addresses


def parse_listen(listen: str, key: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` → (host, port); ValueError naming the config ``key``."""
    host, sep, port_s = listen.rpartition(":")
    if not sep or not host or not port_s.isdigit():
        raise ValueError(f"{key} {listen!r}: want HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_s)
    if not 0 <= port <= 65535:
        raise ValueError(f"{key} {listen!r}: port out of range")
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def is_loopback_network(net: str) -> bool:
    n = ipaddress.ip_network(net, strict=False)
    return n.network_address.is_loopback and n.broadcast_address.is_loopback


def peer_ip(peername: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A TCP peer's address (an IPv4-mapped IPv6 one as IPv4, so IPv4 allow-lists match
    on a dual-stack listener); None when the transport has none."""
    try:
        ip = ipaddress.ip_address(peername[0])  # type: ignore[index]
    except (TypeError, ValueError, IndexError):
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class ClientSlots:
    """A door's connection slots: all of them (less the few kept for root and the daemon's
    user) and those of any one client (a uid, a host), each capped by ``limits.*``."""

    def __init__(self) -> None:
        self._held: dict[object, int] = {}

    def refusal(
        self, limits: LimitsConfig, open_now: int, client: object, is_privileged: bool
    ) -> str | None:
        """The error code that refuses one more connection of ``client``, or None."""
        cap = limits.max_connections - (0 if is_privileged else limits.reserved_connections)
        if open_now >= cap:
            return ErrorCode.TOO_MANY_CONNECTIONS
        if not is_privileged and self._held.get(client, 0) >= limits.max_connections_per_uid:
            return ErrorCode.TOO_MANY_CONNECTIONS_FOR_USER
        return None

    def take(self, client: object) -> None:
        self._held[client] = self._held.get(client, 0) + 1

    def give_back(self, client: object) -> None:
        self._held[client] -= 1
        if self._held[client] <= 0:
            del self._held[client]

    def admit(
        self, limits: LimitsConfig, open_now: int, client: object, is_privileged: bool
    ) -> ServiceError | None:
        """Take a slot for ``client``, or say why not (the error a door answers with)."""
        refused = self.refusal(limits, open_now, client, is_privileged)
        if refused == ErrorCode.TOO_MANY_CONNECTIONS:
            return ServiceError(refused, "connection limit reached")
        if refused is not None:
            return ServiceError(refused, "this client has too many connections")
        self.take(client)
        return None


# ---------------------------------------------------------------- reads


class IdleTimeout(Exception):
    """Nothing read for ``idle_timeout_s`` while no request was in flight."""


class FrameTimeout(Exception):
    """A message begun and not finished within ``frame_timeout_s``."""


class ReadTimer:
    """The idle and frame timeouts of one connection's reads.

    Idle counts from the last byte read or the last request ended; while requests run, a
    silent client is not idle.  A message that has begun (``partial``) must be complete
    within ``frame_timeout_s`` of its first byte; a door whose read spans several packets
    calls :meth:`began` when the first of them arrives."""

    def __init__(self, limits: Callable[[], LimitsConfig]) -> None:
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self.last_activity = self._loop.time()
        self._timeout: asyncio.Timeout | None = None

    def activity(self) -> None:
        self.last_activity = self._loop.time()

    def began(self) -> None:
        """The read in progress has its first bytes: it must end within the frame timeout."""
        tm = self._timeout
        if tm is not None:
            when = self._loop.time() + self._limits().frame_timeout_s
            current = tm.when()
            if current is None or current > when:
                tm.reschedule(when)

    async def read(
        self,
        read: Callable[[], Awaitable[T]],
        partial: Callable[[], bool],
        busy: Callable[[], bool],
    ) -> T:
        """``read()`` within the timeouts; raises :class:`FrameTimeout` (a message begun
        and not finished) or :class:`IdleTimeout` (idle and no request in flight)."""
        while True:
            limits = self._limits()
            now = self._loop.time()
            deadline: float | None = None
            if partial():
                deadline = now + limits.frame_timeout_s
            elif limits.idle_timeout_s > 0:
                deadline = (now if busy() else self.last_activity) + limits.idle_timeout_s
            try:
                async with asyncio.timeout_at(deadline) as tm:
                    self._timeout = tm
                    result = await read()
            except TimeoutError:
                if partial():
                    msg = f"incomplete message for {limits.frame_timeout_s:g} s"
                    raise FrameTimeout(msg) from None
                if busy() or self._loop.time() < self.last_activity + limits.idle_timeout_s:
                    continue
                raise IdleTimeout() from None
            finally:
                self._timeout = None
            self.activity()
            return result


# ---------------------------------------------------------------- output


class Outbox:
    """A connection's output, bounded, with the one too-slow rule of every door.

    Writes go to the transport at once; while its buffer is over
    ``max_output_buffer_bytes`` a writer waits (back-pressure) and the door stops reading.
    A client is too slow when, over the bound, it reads nothing for ``client_too_slow_s``
    beyond ``grace_s`` (the audio it already holds: a real-time player need not read until
    that has played).  Any progress restarts the count, so a slow but steady reader is
    never cut off."""

    def __init__(self, transport: asyncio.BaseTransport, limits: Callable[[], LimitsConfig]):
        self.transport = transport
        self._limits = limits
        self._high = 0
        self.apply_limits()

    def apply_limits(self) -> None:
        """Read the bound again (a SIGHUP may have changed it)."""
        high = self._limits().max_output_buffer_bytes
        if high != self._high:
            self._high = high
            if isinstance(self.transport, asyncio.WriteTransport):
                self.transport.set_write_buffer_limits(high=high)
            bound_kernel_send_buffer(self.transport, high)

    def size(self) -> int:
        if isinstance(self.transport, asyncio.WriteTransport):
            return self.transport.get_write_buffer_size()
        return 0

    @property
    def over_bound(self) -> bool:
        return self.size() > self._high

    async def guard(self, write: Awaitable[T], grace_s: float = 0.0) -> T:
        """Await ``write`` (a drain, or a write that drains) in this task, cut off by the
        too-slow rule: raises :class:`ClientTooSlow` when the client reads nothing for
        ``client_too_slow_s + grace_s``.  (Awaited in place, not as a task of its own: a
        write's bytes go out at once, before anything else can cancel it.)"""
        self.apply_limits()
        task = asyncio.current_task()
        assert task is not None
        slow: list[bool] = []
        watcher = asyncio.ensure_future(self._watch(task, grace_s, slow))
        try:
            return await write
        except asyncio.CancelledError:
            if slow and task.uncancel() == 0:
                raise ClientTooSlow() from None
            raise
        finally:
            watcher.cancel()

    async def _watch(self, task: asyncio.Task[Any], grace_s: float, slow: list[bool]) -> None:
        """Cancel ``task`` (and say why in ``slow``) once the client has read nothing for
        ``client_too_slow_s`` past ``grace_s``; any progress restarts the count."""
        last_size = self.size()
        last_progress = time.monotonic() + grace_s
        while True:
            limit = self._limits().client_too_slow_s
            await asyncio.sleep(min(_POLL_S, limit))
            size, now = self.size(), time.monotonic()
            if size < last_size:
                last_progress = max(last_progress, now)
            elif now - last_progress >= limit:
                slow.append(True)
                task.cancel()
                return
            last_size = size

    def drop(self) -> None:
        """Cut the connection off now (see :func:`drop_connection`)."""
        if isinstance(self.transport, asyncio.WriteTransport):
            drop_connection(self.transport)


# ---------------------------------------------------------------- refusal


async def refuse(
    transport: asyncio.BaseTransport,
    payload: bytes,
    closed: Awaitable[Any] | None = None,
    linger_s: float = LINGER_S,
) -> None:
    """Send ``payload`` (the error), shut the writing side, and close once the client has
    closed (``closed`` resolves: a door that reads drops what it still sends) or after
    ``linger_s``: closing with its bytes unread would reset the connection before the
    client sees why."""
    if not isinstance(transport, asyncio.WriteTransport) or transport.is_closing():
        return
    try:
        transport.write(payload)
        if transport.can_write_eof():
            transport.write_eof()
    except (ConnectionError, OSError, RuntimeError):
        transport.abort()
        return
    try:
        async with asyncio.timeout(linger_s):
            await (closed if closed is not None else asyncio.sleep(linger_s))
    except (ConnectionError, OSError, TimeoutError):
        transport.abort()  # not read within the linger time: what is left is dropped
    else:
        transport.close()


async def read_to_eof(reader: asyncio.StreamReader) -> None:
    """Read and drop until the client closes (a refused stream door's ``closed``)."""
    while await reader.read(65536):
        pass
