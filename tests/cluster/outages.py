"""What a client meets when a server behind the hubs is down (shared by the outage tests)."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

__all__ = ["close_of_new_room"]


async def close_of_new_room(url: str) -> tuple[int | None, str | None]:
    """Open a room the hub does not serve yet at ``url``; the hub's close code and reason.

    Fails the test if the hub neither closes nor ends the connection within 10 s.
    """
    async with ws_connect(url, compression=None) as ws:
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), 10)
    return ws.close_code, ws.close_reason
