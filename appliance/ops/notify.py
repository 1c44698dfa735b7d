"""systemd service notifications (sd_notify) without libsystemd.

The protocol is one datagram of ``KEY=VALUE`` lines sent to the ``AF_UNIX`` socket named by
``$NOTIFY_SOCKET`` (a leading ``@`` names the abstract namespace).  Sending uses a
non-blocking socket so it can be called from the event loop: a full receive queue or a gone
manager drops the message with a log line instead of stalling speech.  Except a change of
state (``READY``, ``RELOADING``, ``STOPPING``): one that meets a full queue is *owed* and
sent again, first, with the next message (a watchdog ping; :func:`settle_owed` where there
is none).  Lost, a ``READY`` leaves systemd waiting until it kills a healthy service; the
queue does fill while a slow box warms up, its pings unread (``net.unix.max_dgram_qlen``
is 10 where no sysctl raised it).  At most :data:`OWED_MAX` are kept.

The watchdog keeper (:func:`watchdog_loop`) pings systemd only while the inference workers'
heartbeat is fresh, so a wedged worker (the loop alive, the model stuck) gets the service
restarted instead of silently queueing requests forever.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

STATE_KEYS = frozenset({"READY", "RELOADING", "STOPPING"})
"""The fields whose message is owed, not dropped, when the manager's queue is full."""
OWED_MAX = 8


def _address(raw: str) -> str | bytes:
    """The ``sendto`` address for a ``$NOTIFY_SOCKET`` value."""
    if raw.startswith("@"):
        # Linux abstract namespace: a leading NUL byte, the rest is the name (no terminator).
        return b"\0" + raw[1:].encode()
    return raw


def _line(key: str, value: object) -> str:
    text = str(int(value) if isinstance(value, bool) else value)
    # One field per line: a newline inside a value would start a bogus field.
    return f"{key.upper()}={text.replace(chr(10), ' ')}"


class Notifier:
    """Sends notifications to the service manager; a no-op when not run under one."""

    def __init__(self, address: str | bytes | None, sock: socket.socket | None) -> None:
        self._address = address
        self._sock = sock
        self._last_errno: int | None = None
        self._owed: collections.deque[bytes] = collections.deque(maxlen=OWED_MAX)

    @classmethod
    def disabled(cls) -> Notifier:
        return cls(None, None)

    @classmethod
    def for_address(cls, address: str | bytes) -> Notifier:
        """A notifier sending to ``address`` over a new non-blocking datagram socket."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        return cls(address, sock)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """A notifier for ``$NOTIFY_SOCKET``; a disabled one when unset or not a socket path."""
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        if not raw:
            return cls.disabled()
        if not (raw.startswith("/") or raw.startswith("@")):
            # vsock and other transports exist (systemd 253+); a daemon on one box uses neither.
            log.warning("NOTIFY_SOCKET=%r is not a Unix socket path; not notifying", raw)
            return cls.disabled()
        return cls.for_address(_address(raw))

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, **fields: object) -> bool:
        """Send ``KEY=VALUE`` fields in one datagram; True when the manager got it.

        Never raises and never blocks: errors are logged (once per distinct error, so a
        missing manager does not flood the journal) and reported as False.  Owed state
        changes go first; a state change that meets a full queue is owed (see the module).
        """
        if self._sock is None or self._address is None or not fields:
            return False
        payload = "\n".join(_line(k, v) for k, v in fields.items()).encode()
        full = not self.pay_owed() or not self._deliver(payload, ",".join(fields))
        if full and STATE_KEYS.intersection(k.upper() for k in fields):
            self._owed.append(payload)
        return not full

    @property
    def owed(self) -> int:
        """State changes waiting for room in the manager's queue."""
        return len(self._owed)

    def pay_owed(self) -> bool:
        """Send the owed state changes, oldest first; True when none is left."""
        while self._owed:
            if not self._deliver(self._owed[0], "owed"):
                return False
            self._owed.popleft()
        return True

    def _deliver(self, payload: bytes, what: str) -> bool:
        assert self._sock is not None and self._address is not None
        try:
            self._sock.sendto(payload, self._address)
        except OSError as exc:
            if exc.errno != self._last_errno:
                log.warning("sd_notify %s failed: %s", what, exc)
                self._last_errno = exc.errno
            return False
        self._last_errno = None
        return True

    def ready(self, status: str | None = None) -> bool:
        """``READY=1``: voices loaded and warmed, clients may be served."""
        if status is None:
            return self.send(READY=1)
        return self.send(READY=1, STATUS=status)

    def status(self, text: str) -> bool:
        """``STATUS=``: the line ``systemctl status`` shows."""
        return self.send(STATUS=text)

    def reloading(self) -> bool:
        """``RELOADING=1`` at the start of a SIGHUP reload; follow with :meth:`ready`."""
        # MONOTONIC_USEC lets systemd (253+, Type=notify-reload) match this to the request.
        return self.send(
            RELOADING=1, MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        )

    def stopping(self) -> bool:
        """``STOPPING=1``: shutdown has begun."""
        return self.send(STOPPING=1)

    def extend_timeout(self, usec: int) -> bool:
        """``EXTEND_TIMEOUT_USEC=``: a long step (an engine build) needs ``usec`` more."""
        return self.send(EXTEND_TIMEOUT_USEC=max(0, int(usec)))

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the service is alive and doing its work."""
        return self.send(WATCHDOG=1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._address = None


def watchdog_interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """How often to ping: half of ``$WATCHDOG_USEC``; None when no watchdog is asked for.

    ``$WATCHDOG_PID``, when set, must be this process (the variable is inherited by children
    that must not ping on our behalf).
    """
    env = os.environ if environ is None else environ
    raw = env.get("WATCHDOG_USEC", "")
    if not raw:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            log.warning("ignoring malformed WATCHDOG_PID=%r", pid)
            return None
    try:
        usec = int(raw)
    except ValueError:
        log.warning("ignoring malformed WATCHDOG_USEC=%r", raw)
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


async def settle_owed(notifier: Notifier, interval_s: float = 0.5) -> None:
    """Re-send owed state changes every ``interval_s`` until none is left (where no
    watchdog ping would carry them)."""
    while not notifier.pay_owed():
        await asyncio.sleep(interval_s)


async def watchdog_loop(
    notifier: Notifier, interval_s: float, heartbeat_fresh: Callable[[], bool]
) -> None:
    """Send ``WATCHDOG=1`` every ``interval_s`` while ``heartbeat_fresh()``; runs until cancelled.

    Runs on the event loop, so a blocked loop also stops the pings.  While the heartbeat is
    stale nothing is sent: systemd's ``WatchdogSec=`` then kills and restarts the service.
    """
    stalled = False
    while True:
        if heartbeat_fresh():
            if stalled:
                log.warning("inference worker heartbeat is fresh again; watchdog pings resume")
                stalled = False
            notifier.watchdog()
        elif not stalled:
            log.error("inference worker heartbeat is stale; withholding watchdog pings")
            notifier.status("inference worker stalled; waiting for the watchdog restart")
            stalled = True
        await asyncio.sleep(interval_s)
