"""The module's one protocol-v1 connection to ttsd, and what ttsd's ``info`` said.

Lifecycle: :meth:`TtsdLink.ensure` connects lazily (at ``INIT``, then whenever a message
finds the connection gone: a restarted daemon is reconnected by the next message);
:meth:`TtsdLink.drop` forgets a lost one; :meth:`TtsdLink.close` ends it with the module.
Cancels of ttsd requests run as tasks of their own (a ``STOP`` never waits for ttsd); they
are kept here and cancelled by ``close``.
Bounds: one connection at a time (a lock orders connects); the limits a message is cut to
are the daemon's own (``info.limits``), with protocol v1's defaults when it says none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from appliance.clients.client import AsyncClient, TtsdError
from appliance.clients.speechd.options import voices_of

log = logging.getLogger("sd_ttsd")

REQUEST_ROOM_BYTES = 1024
"""Room for a request's other fields under the daemon's message size."""


class TtsdLink:
    """The connection, ``info``, and whether this daemon takes SSML (None: not known yet)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.client: AsyncClient | None = None
        self.info: dict[str, Any] = {}
        self.ssml_supported: bool | None = None
        self._connect_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def ensure(self) -> AsyncClient:
        """The connection, made (and ``info`` asked) if there is none; raises TtsdError."""
        async with self._connect_lock:
            if self.client is not None and self.client.connected:
                return self.client
            if self.client is not None:
                await self.drop()
            client = await AsyncClient.connect(self.socket_path)
            try:
                self.info = await client.request("info")
            except TtsdError:
                await client.close()
                raise
            self.client = client
            self.ssml_supported = None  # a restarted daemon may be a newer one
            log.info("connected to ttsd (%s) at %s", self.info.get("backend"), self.socket_path)
            return client

    async def refresh_info(self) -> None:
        """Ask ``info`` again (``LIST VOICES``: voices may have been added)."""
        client = await self.ensure()
        self.info = await client.request("info")

    async def drop(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.close()

    def cancel_soon(self, rid: int) -> bool:
        """Cancel ttsd request ``rid`` without waiting; False when there is no connection."""
        if self.client is None:
            return False
        self._spawn(self._cancel(self.client, rid))
        return True

    async def _cancel(self, client: AsyncClient, rid: int) -> None:
        try:
            await client.request("cancel", target=rid)
        except TtsdError as exc:
            log.debug("cancel %d: %s", rid, exc)  # it had already ended

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.drop()

    # --- what info said ---------------------------------------------------------------------

    @property
    def voices(self) -> list[dict[str, Any]]:
        return voices_of(self.info)

    @property
    def max_text_chars(self) -> int:
        limits = self.info.get("limits") or {}
        return max(1, int(limits.get("max_text_chars") or 20000))

    def fits_one_request(self, text: str) -> bool:
        limits = self.info.get("limits") or {}
        max_bytes = int(limits.get("max_message_bytes") or 65536)
        return (
            len(text) <= self.max_text_chars
            and len(text.encode()) <= max_bytes - REQUEST_ROOM_BYTES
        )
