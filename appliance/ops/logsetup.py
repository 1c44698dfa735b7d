"""Log output for a terminal or for journald.

Under systemd, stderr is a stream to journald, which stamps each line with its own time and
reads a ``<N>`` syslog priority prefix: adding our own timestamp would only duplicate it, and
without the prefix every line lands at the unit's default priority (``journalctl -p warning``
would miss our warnings).  ``$JOURNAL_STREAM`` (``device:inode`` of that stream) tells the two
cases apart; it is compared with stderr itself because a child started from a service
inherits the variable while its stderr may point elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import TextIO

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

TERMINAL_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
JOURNAL_FORMAT = "%(name)s: %(message)s"


def syslog_priority(levelno: int) -> int:
    """The syslog priority journald stores for a Python log level."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


class JournalFormatter(logging.Formatter):
    """``<P>name: message``; every line of a multi-line record (a traceback) gets the prefix,
    because journald turns each line into its own entry."""

    def __init__(self) -> None:
        super().__init__(JOURNAL_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


def stream_is_journal(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` is the journald stream named by ``$JOURNAL_STREAM``."""
    env = os.environ if environ is None else environ
    raw = env.get("JOURNAL_STREAM", "")
    if not raw:
        return False
    try:
        dev, ino = (int(part) for part in raw.split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def _level(level: str) -> int:
    try:
        return LEVELS[level.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LEVELS)})") from None


class _OurHandler(logging.StreamHandler[TextIO]):
    """Marks the handler this module installed, so reconfiguring replaces it."""


def configure_logging(
    level: str, *, stream: TextIO | None = None, environ: Mapping[str, str] | None = None
) -> None:
    """Send the root logger to ``stream`` (stderr) in the journal or terminal format."""
    out = sys.stderr if stream is None else stream
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    handler = _OurHandler(out)
    if stream_is_journal(out, environ):
        handler.setFormatter(JournalFormatter())
    else:
        handler.setFormatter(logging.Formatter(TERMINAL_FORMAT))
    root.addHandler(handler)
    root.setLevel(_level(level))


def set_level(level: str) -> None:
    """Change the level live (SIGHUP reload of ``logging.level``)."""
    logging.getLogger().setLevel(_level(level))


class Throttle:
    """At most one log line per kind of event every ``interval_s``, so that a client that
    sends bad requests as fast as it can fills neither the journal nor a CPU with log
    lines; the next line says how many were held back.

    A bug's traceback is logged the first time only (``exc_info`` then), one line after."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._seen: set[str] = set()

    def log(
        self,
        logger: logging.Logger,
        level: int,
        kind: str,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if held:
            msg += f" (and {held} more in {now - last:.0f} s)" if last is not None else ""
        first = kind not in self._seen
        self._seen.add(kind)
        if len(self._last) > 256:  # kinds are few; never let them grow without bound
            self._last, self._seen = {kind: now}, {kind}
        logger.log(level, msg, *args, exc_info=exc_info if first else None)


def one_line(exc: BaseException) -> str:
    """An exception as one log line (its words, at most 300 characters; its type if empty)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
