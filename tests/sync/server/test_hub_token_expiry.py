"""A connection lives no longer than its access token."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hubs import SECRET
from pycrdt import Doc, Map
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.wire import protocol as p


def _update(key: str, value: int) -> bytes:
    doc: Doc[Any] = Doc()
    doc.get("state", type=Map)[key] = value
    return p.encode_update(doc.get_update())


async def test_a_connection_is_closed_with_1008_when_its_token_expires(secured: Hub) -> None:
    token = mint_token(SECRET, "team/*", "write", 2)
    expires = int(time.time() + 2)
    async with ws_connect(secured.url("team/t") + f"?token={token}", compression=None) as ws:
        await ws.send(_update("before", 1))
        received: list[p.Message] = []
        with pytest.raises(ConnectionClosed) as info:
            async with asyncio.timeout(6):
                while True:
                    received.append(p.decode_message(await ws.recv()))  # type: ignore[arg-type]
        closed_at = time.time()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1008
        assert info.value.rcvd.reason == "access token expired"
        assert expires <= closed_at < expires + 1.5
        denied = [m for m in received if isinstance(m, p.PermissionDenied)]
        assert denied and denied[0].reason == "access token expired"
        with pytest.raises(ConnectionClosed):
            await ws.send(_update("after", 2))
    assert secured.rooms["team/t"].state.snapshot() == {"before": 1}


async def test_a_message_arriving_after_expiry_is_not_carried_out(secured: Hub) -> None:
    token = mint_token(SECRET, "team/*", "write", 2)
    async with ws_connect(secured.url("team/u") + f"?token={token}", compression=None) as ws:
        await ws.send(_update("before", 1))
        # the hub's timer is stopped: only the check on each message is left
        timers = [
            task
            for task in asyncio.all_tasks()
            if getattr(task.get_coro(), "__qualname__", "") == "expire_at"
        ]
        assert len(timers) == 1
        timers[0].cancel()
        await asyncio.sleep(max(0.0, int(time.time() + 2) - time.time()) + 0.1)
        await ws.send(_update("late", 2))
        with pytest.raises(ConnectionClosed) as info:
            async with asyncio.timeout(5):
                while True:
                    await ws.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1008
    assert secured.rooms["team/u"].state.snapshot() == {"before": 1}
