"""systemd socket activation (sd_listen_fds) without libsystemd.

With ``ttsd.socket`` enabled, systemd owns ``/run/ttsd/ttsd.sock``: it binds and listens before
the daemon starts and hands the listening socket over as fd 3 (``$LISTEN_FDS`` sockets from
fd 3 on, meant for ``$LISTEN_PID``).  Clients that connect during a restart wait in the
backlog instead of failing.  The daemon must serve that socket as is and never unlink it:
the path belongs to systemd.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping

log = logging.getLogger(__name__)

LISTEN_FDS_START = 3
_ENV_KEYS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class ActivationError(RuntimeError):
    """Sockets were passed in, but not ones this daemon can serve."""


def listen_fds(
    environ: MutableMapping[str, str] | None = None, *, unset_environment: bool = True
) -> list[socket.socket]:
    """The sockets passed by the service manager, in fd order; ``[]`` when not activated.

    Honours ``$LISTEN_PID`` (the variables may be inherited by a child they were not meant
    for) and, by default, removes the variables afterwards so our own children do not
    claim the fds too.  The fds are marked close-on-exec.
    """
    env = os.environ if environ is None else environ
    try:
        return _collect(env)
    finally:
        if unset_environment:
            for key in _ENV_KEYS:
                env.pop(key, None)


def _collect(env: MutableMapping[str, str]) -> list[socket.socket]:
    raw_pid = env.get("LISTEN_PID", "")
    raw_fds = env.get("LISTEN_FDS", "")
    if not raw_pid or not raw_fds:
        return []
    try:
        pid = int(raw_pid)
        count = int(raw_fds)
    except ValueError:
        log.warning("ignoring malformed LISTEN_PID=%r LISTEN_FDS=%r", raw_pid, raw_fds)
        return []
    if pid != os.getpid():
        return []
    if count < 0:
        log.warning("ignoring LISTEN_FDS=%d", count)
        return []
    sockets = []
    for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + count):
        os.set_inheritable(fd, False)
        # socket.socket(fileno=...) reads family and type from the fd itself.
        sockets.append(socket.socket(fileno=fd))
    return sockets


def activated_unix_listener(sockets: list[socket.socket]) -> socket.socket | None:
    """The one ``AF_UNIX`` stream socket to serve among ``sockets``; None when none passed.

    Raises :class:`ActivationError` for anything else (two sockets, a datagram socket, a TCP
    port): serving the wrong thing, or quietly binding our own path next to it, would be worse
    than refusing to start.
    """
    if not sockets:
        return None
    if len(sockets) != 1:
        raise ActivationError(f"expected one activated socket, got {len(sockets)}")
    (sock,) = sockets
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise ActivationError(
            f"activated socket is {sock.family.name}/{sock.type.name}, not AF_UNIX/SOCK_STREAM"
        )
    return sock
