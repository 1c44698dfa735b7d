"""A raw protocol-v1 connection for tests: send anything, read events with a timeout."""

from __future__ import annotations

import socket
import time
from typing import Any

from appliance.clients.client import decoder, encode


class Wire:
    def __init__(self, path: str, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.unpacker = decoder()
        self.timeout = timeout
        self.backlog: list[dict[str, Any]] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(self, obj: Any) -> None:
        self.sock.sendall(encode(obj))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event, or None when the server closed the connection."""
        if self.backlog:
            return self.backlog.pop(0)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for msg in self.unpacker:
                assert isinstance(msg, dict), msg
                return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no event")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.unpacker.feed(data)

    def until(
        self, rid: int | None, events: tuple[str, ...] = ("end", "error")
    ) -> list[dict[str, Any]]:
        """All events of ``rid`` up to and including the first of ``events``."""
        got: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        while True:
            ev = self.recv()
            if ev is None:
                raise ConnectionError(f"closed; got {got}")
            if ev.get("id") != rid:
                skipped.append(ev)
                continue
            got.append(ev)
            if ev.get("event") in events:
                self.backlog = skipped + self.backlog
                return got

    def call(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.send(obj)
        return self.until(
            obj.get("id"), ("pong", "info", "stats", "health", "ok", "error", "cancelled", "end")
        )[-1]
