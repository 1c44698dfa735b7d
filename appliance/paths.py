"""Where the daemon's socket lives by default."""

from __future__ import annotations

import os
from pathlib import Path


def default_socket_path() -> Path:
    if os.geteuid() == 0:
        return Path("/run/ttsd/ttsd.sock")
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/ttsd-{os.getuid()}"
    return Path(runtime_dir) / "ttsd" / "ttsd.sock"
