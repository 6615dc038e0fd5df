"""What a client meets when a server behind the hubs is down (shared by the outage tests)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

__all__ = ["assert_try_again_later", "close_of_new_room"]


async def close_of_new_room(url: str) -> tuple[int | None, str | None]:
    """Open a room the hub does not serve yet at ``url``; the hub's close code and reason.

    Fails the test if the hub neither closes nor ends the connection within 10 s.
    """
    async with ws_connect(url, compression=None) as ws:
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), 10)
    return ws.close_code, ws.close_reason


async def assert_try_again_later(url: str, caplog: pytest.LogCaptureFixture, told: str) -> None:
    """A room opened at ``url`` now is closed with 1013 (try again later), not 1011.

    The hub's log says ``told`` and "closing with 1013" in one line, and no "internal
    error" (a traceback): an outage of a server behind the hub costs a client a
    reconnection, not a strike against its oldest merge.
    """
    caplog.set_level(logging.INFO)
    code, reason = await close_of_new_room(url)
    assert code == 1013, (code, reason)
    assert "internal error" not in caplog.text
    assert told in caplog.text and "closing with 1013" in caplog.text
