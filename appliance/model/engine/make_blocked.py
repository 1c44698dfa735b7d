"""``python -m appliance.model.engine.make_blocked PARENT SOURCE OUT CUT_JSON``: the
blocked 2-D decoder made and checked in a process of its own (see
:func:`appliance.model.engine.blocked.blocked_lean`, its one caller).

Prints one line, what it made (exit 0), or why it made none (exit
:data:`~appliance.model.engine.blocked.NOT_BLOCKED`); anything else is a failure the caller
reports with the last line of stderr.  Bounds: the caller's timeout; the files it writes
are in ``OUT``'s directory, the caller's private temporary one; it ends with the caller (a
daemon stopped during its start leaves no child behind writing into a directory nobody
will remove).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

from appliance.model.engine.blocked import NOT_BLOCKED, NotBlocked, make
from appliance.voicetypes import CutNames

PR_SET_PDEATHSIG = 1


def _end_with(parent: int) -> bool:
    """Ask the kernel for SIGKILL when the caller ends; False when it has already ended
    (asked after it did, the signal would never come)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the caller's timeout still bounds it
        pass
    return os.getppid() == parent


def main(argv: list[str]) -> int:
    parent, source, out, names = argv
    if not _end_with(int(parent)):
        return 1
    fields = json.loads(names)
    cut = CutNames(**{**fields, "inputs": tuple(fields["inputs"])})
    try:
        print(make(Path(source), cut, Path(out)), flush=True)
    except NotBlocked as exc:
        print(exc, flush=True)
        return NOT_BLOCKED
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
