"""ALSA's own messages, routed to the daemon's log instead of its terminal.

libasound reports through its error handler, which by default writes to stderr: ``ALSA
lib pcm.c:8570:(snd_pcm_recover) underrun occurred`` landed in ``make run``'s terminal at
every underrun of a busy start-up (issue 42).  ``snd_lib_error_set_handler`` (alsa-lib's
error.h, "Sets the error handler") replaces that handler for the whole process: the one
installed here counts each message and keeps the last ones (without their variadic
arguments, which ctypes cannot read: ``underrun occurred`` needs none) for the player's
supervisor to log at debug level.

It may be called on PortAudio's audio thread, so it only appends to a bounded deque.
Lifecycle: installed once per process, on the first :func:`messages` call (before the
player opens a device), and kept for the life of the process: libasound holds a bare
pointer to it.  Without libasound (no ALSA: another PortAudio host API) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections import deque

log = logging.getLogger(__name__)

_HANDLER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p
)
"""``void (*)(const char *file, int line, const char *function, int err, const char *fmt,
...)``: the fixed arguments of ``snd_lib_error_handler_t``."""


class AlsaMessages:
    """What libasound said, kept for the supervisor: a count and the latest lines."""

    def __init__(self, keep: int = 32) -> None:
        self.count = 0
        self.pending: deque[str] = deque(maxlen=keep)
        self.installed = False
        self._c_handler = _HANDLER(self._said)

    def _said(
        self, file: bytes | None, line: int, function: bytes | None, err: int, fmt: bytes | None
    ) -> None:
        self.count += 1
        where = (function or b"?").decode(errors="replace")
        self.pending.append(f"{where}: {(fmt or b'').decode(errors='replace')}")

    def install(self) -> None:
        name = ctypes.util.find_library("asound")
        if name is None:
            return
        try:
            lib = ctypes.CDLL(name)
            rc = lib.snd_lib_error_set_handler(self._c_handler)
        except (OSError, AttributeError) as exc:  # a libasound without the call
            log.debug("ALSA messages stay on stderr: %s", exc)
            return
        self.installed = rc == 0

    def drain(self) -> list[str]:
        out = []
        while self.pending:
            out.append(self.pending.popleft())
        return out


_lock = threading.Lock()
_messages: AlsaMessages | None = None


def messages() -> AlsaMessages:
    """The process's handler, installed on the first call."""
    global _messages
    with _lock:
        if _messages is None:
            _messages = AlsaMessages()
            _messages.install()
        return _messages
