"""The frame's listener and gate on a real Unix socket, in-process (no daemon): a door in a
few lines, with the real core behind it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.doors.frame.listener import Admitted, StreamDoor
from appliance.doors.frame.requests import Request
from appliance.doors.frame.session import Session, StreamChannel, WireProtocol
from appliance.errors import ServiceError
from appliance.ops.config import Config, LimitsConfig, VoicesConfig

log = logging.getLogger("tests.doors.frame")


class _Lines(WireProtocol[str]):
    """One message a line; ``say K`` ends with ``end K``; ``crash`` is a bug below dispatch."""

    async def read(self) -> str | None:
        channel = self.session.channel
        assert isinstance(channel, StreamChannel)
        line = await channel.reader.readline()
        return line.decode().strip() if line else None

    @property
    def partial(self) -> bool:
        return False

    async def dispatch(self, msg: str) -> None:
        op, _, key = msg.partition(" ")
        self.session.requests.start(Request(key, op), self._body(key))

    async def _body(self, key: str) -> bytes:
        return f"end {key}\n".encode()

    def error_bytes(self, key: Hashable, exc: ServiceError) -> bytes:
        return f"error {key} {exc.code}\n".encode()


class _Crashing(_Lines):
    def opened(self) -> None:
        raise RuntimeError("a bug before the read loop")


class LineDoor(StreamDoor):
    name = "lines"

    def __init__(self, service: Service) -> None:
        super().__init__(service, log)
        self.crash_next = False

    def protocol(self, session: Session) -> WireProtocol[Any]:
        crash, self.crash_next = self.crash_next, False
        return _Crashing(session) if crash else _Lines(session)

    async def admit(self, writer: asyncio.StreamWriter) -> Admitted | ServiceError:
        return Admitted(("uid", 0), privileged=True)

    async def start(self) -> None:
        """Listening is the test's (listen_unix)."""


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    cfg = Config(voices=VoicesConfig(cache_dir=str(voice_cache)), limits=LimitsConfig())
    rt = Runtime.load(cfg)
    yield rt
    rt.close()


async def _talk(path: Path, send: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(send)
    if send:
        writer.write_eof()
    data = b""
    try:
        while piece := await asyncio.wait_for(reader.read(4096), 10):
            data += piece
    except ConnectionResetError:
        pass  # closed with what we sent unread (Linux resets a Unix socket then)
    writer.close()
    return data


def test_serves_refuses_while_stopping_and_survives_a_bug(runtime: Runtime, tmp_path: Path) -> None:
    async def scenario() -> None:
        service = Service(runtime)
        door = LineDoor(service)
        path = tmp_path / "lines.sock"
        await door.listen_unix(path, 0o600)
        # Half-closed after two requests: both answered, then the close.
        assert sorted((await _talk(path, b"say 1\nsay 2\n")).split(b"\n")) == [
            b"",
            b"end 1",
            b"end 2",
        ]
        door.crash_next = True  # a bug in one connection closes it, not the door
        assert await _talk(path, b"say 3\n") == b""
        assert await _talk(path, b"say 4\n") == b"end 4\n"
        door.close_listener()  # the daemon stops: a newcomer is told why, then closed
        assert await _talk(path, b"") == b"error None shutting_down\n"
        assert service.stats()["errors"].get("shutting_down") == 1
        await door.close()
        assert not path.exists()
        service.close()

    asyncio.run(scenario())
