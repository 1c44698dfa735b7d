"""What the link reads from ttsd's info, and a cancel with no connection; no daemon."""

from __future__ import annotations

import asyncio

import pytest

from appliance.clients.client import TtsdError
from appliance.clients.speechd.link import REQUEST_ROOM_BYTES, TtsdLink


def test_limits_come_from_info_with_v1s_defaults() -> None:
    link = TtsdLink("/nonexistent/ttsd.sock")
    assert link.max_text_chars == 20000 and link.fits_one_request("x" * 20000)
    link.info = {"limits": {"max_text_chars": 10, "max_message_bytes": REQUEST_ROOM_BYTES + 8}}
    assert link.fits_one_request("12345678") and not link.fits_one_request("123456789")
    assert not link.fits_one_request("é" * 5)  # 10 bytes: over the message, not the chars
    assert link.max_text_chars == 10


def test_no_connection_means_no_cancel_and_a_connect_error() -> None:
    async def run() -> None:
        link = TtsdLink("/nonexistent/ttsd.sock")
        assert link.cancel_soon(3) is False
        with pytest.raises(TtsdError):
            await link.ensure()
        assert link.client is None
        await link.close()

    asyncio.run(run())
