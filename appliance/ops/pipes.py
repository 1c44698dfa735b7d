"""Command-line programs whose reader goes away: ``ttsctl synth … -o - | head -c 100``.

Python ignores SIGPIPE, so a write to a pipe nobody reads any more raises BrokenPipeError,
and the interpreter's last flush of stdout at exit prints a second complaint.
:func:`quiet_broken_pipe` ends such a program as a C tool ends: silently, with the status
a shell gives a process killed by SIGPIPE.  Errors of the program's own sockets are its
own to handle (the client library turns them into its errors before they get here).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE
"""141: what ``$?`` says of a process SIGPIPE ended."""


def quiet_broken_pipe(run: Callable[[], int]) -> int:
    """``run()``'s status, or :data:`BROKEN_PIPE_STATUS` with nothing printed when its
    standard output was closed by its reader."""
    try:
        status = run()
        sys.stdout.flush()  # inside: a reader gone at the last write is caught here too
        return status
    except BrokenPipeError:
        # Nothing more can reach the reader; the interpreter's flush at exit must not try.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_STATUS
