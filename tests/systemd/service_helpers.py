"""Shared by the service tests: start a process the way systemd socket activation does."""

from __future__ import annotations

import sys

# What systemd does between fork and exec: the listening socket onto fd 3, LISTEN_PID = the
# pid that exec()s (so only the child knows it), then exec the service.
_TRAMPOLINE = r"""
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.set_inheritable(3, True)
if sys.argv[2] == "self":
    os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[3], sys.argv[3:])
"""


def activated_command(fd: int, argv: list[str], pid_is_child: bool = True) -> list[str]:
    """argv that runs ``argv`` with ``fd`` as fd 3 and ``LISTEN_PID`` set to its own pid.

    The caller sets ``LISTEN_FDS`` and passes ``fd`` in ``pass_fds``.  With ``pid_is_child``
    false, ``LISTEN_PID`` is left as the caller's environment has it.
    """
    who = "self" if pid_is_child else "keep"
    return [sys.executable, "-c", _TRAMPOLINE, str(fd), who, *argv]
