"""A closed connection's protocol is freed at once, not by a garbage collection.

``websockets``' protocol parses with a generator that holds it, left suspended once the
connection is closed, and keeps a parser's error with its traceback, whose frames hold
the protocol too: cycles that kept each closed connection's protocol (its buffers)
until a full garbage collection, which a hub makes rarely (see ``sync.server._memory``).
The hub's connections break both when they are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref

from hubs import eventually
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.wire import protocol as p


async def _closed_by(hub: Hub, message: bytes | str) -> tuple[int | None, weakref.ref[object]]:
    async with ws_connect(hub.url("room"), max_size=None) as ws:
        await ws.recv()  # the greeting: the hub's side is set up
        (server,) = hub._live
        alive: weakref.ref[object] = weakref.ref(server.protocol)  # with its reader's buffer
        del server
        with contextlib.suppress(ConnectionClosed):
            if message:
                await ws.send(message)
                await ws.wait_closed()
    await eventually(lambda: not hub._live)
    await asyncio.sleep(0.1)  # the handler's task and the transport finish
    return ws.close_code, alive


async def test_closed_connections_are_freed_without_a_collection() -> None:
    gc.collect()
    gc.disable()
    try:
        async with Hub(port=0, limits=Limits(max_message=2**16)) as hub:
            too_big = p.encode_update(b"\x00" * 2**17)
            code, alive = await _closed_by(hub, too_big)
            assert code == 1009
            assert alive() is None, (
                "the protocol of a connection closed on a message too big lives on"
            )
            code, alive = await _closed_by(hub, "text frames are refused")
            assert code == 1003
            assert alive() is None
            code, alive = await _closed_by(hub, b"")  # closed by the client, cleanly
            assert alive() is None
    finally:
        gc.enable()
