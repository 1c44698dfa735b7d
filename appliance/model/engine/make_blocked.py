"""``python -m appliance.model.engine.make_blocked SOURCE OUT CUT_JSON``: the blocked 2-D
decoder made and checked in a process of its own (see
:func:`appliance.model.engine.blocked.blocked_lean`, its one caller).

Prints one line, what it made (exit 0), or why it made none (exit
:data:`~appliance.model.engine.blocked.NOT_BLOCKED`); anything else is a failure the caller
reports with the last line of stderr.  Bounds: the caller's timeout; the files it writes
are in ``OUT``'s directory, the caller's private temporary one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from appliance.model.engine.blocked import NOT_BLOCKED, NotBlocked, make
from appliance.voicetypes import CutNames


def main(argv: list[str]) -> int:
    source, out, names = argv
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
