"""The victim of tests/ops/test_paths.py: ``python -m tests.ops.victim UID ACTION [ARG]``
imports everything it runs while still root, drops to UID (no groups) and runs ACTION,
printing what it says; its exit status is ACTION's (:data:`UNCAUGHT` if it raised).

A fresh interpreter, not a fork of the pytest worker: a fork carries over the locks that
the worker's other threads held at that moment (an import's, a logging handler's), and a
child that then needs one waits for good (CI saw ``ttsctl ping`` hang 60 s that way).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

# Imported as root: the victim's uid may not be able to read the interpreter's own files
# (a Python under /root).
import appliance.ops.logsetup  # noqa: F401
from appliance.clients.client import Client, TtsdError
from appliance.clients.ctl import main as ttsctl_main
from appliance.main import main as ttsd_main
from appliance.ops.paths import default_socket_path, prepare_socket_dir


def client_ping() -> int:
    try:
        with Client(timeout=5) as c:
            print("connected to", c.path)
            return 0
    except TtsdError as exc:
        print("refused:", exc)
        return 3


def prepare() -> int:
    path = default_socket_path()
    prepare_socket_dir(path)
    print(path)
    return 0


ACTIONS: dict[str, Callable[..., int]] = {
    "client-ping": client_ping,
    "ttsctl-ping": lambda: ttsctl_main(["ping"]),
    "prepare": prepare,
    "serve": lambda config: ttsd_main(["serve", "--config", config]),
}


UNCAUGHT = 99
"""The status when ACTION raised: not 1, which ``ttsd`` and ``ttsctl`` return for a refusal
they explain, so that a traceback cannot pass for one."""


def main(argv: list[str]) -> int:
    uid, action, *args = argv
    os.setgroups([])
    os.setgid(int(uid))
    os.setuid(int(uid))
    try:
        return ACTIONS[action](*args)
    except Exception:  # the boundary: the test reads the traceback in the output
        traceback.print_exc()
        return UNCAUGHT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
