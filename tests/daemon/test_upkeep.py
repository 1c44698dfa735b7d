"""What a serving daemon tells systemd (appliance.upkeep), on a real datagram socket as
``$NOTIFY_SOCKET`` and no daemon: READY=1 with its status line once serving and after a
reload, and a STATUS line as requests end at most every couple of seconds."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from appliance.core.runtime import Runtime
from appliance.core.scheduler import Scheduler
from appliance.ops.config import parse_config
from appliance.ops.metrics import Metrics
from appliance.ops.notify import Notifier
from appliance.upkeep import Upkeep, status_line


def _received(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_ready_reloaded_and_status_lines_reach_the_manager(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    manager.bind(path)
    manager.setblocking(False)
    # A runtime with no voices: what systemd is told reads only its metrics and names.
    runtime = Runtime(parse_config({}), {}, "none", Scheduler(1), Metrics())
    notifier = Notifier.for_address(path)
    tasks: list[asyncio.Task[Any]] = []

    async def scenario() -> list[str]:
        upkeep = Upkeep(notifier, lambda: runtime, tasks.append)
        upkeep.ready(None)
        upkeep.on_request_done()
        upkeep.on_request_done()  # within 2 s of the last: not said again
        upkeep.reloaded()
        return _received(manager)

    try:
        said = asyncio.run(scenario())
    finally:
        notifier.close()
        manager.close()
    line = status_line(runtime)
    assert line == "backend=onnx-cpu voices= served=0"
    assert said == [f"READY=1\nSTATUS={line}", f"STATUS={line}", f"READY=1\nSTATUS={line}"]
    assert tasks == []  # nothing owed, no watchdog asked for: no task started
