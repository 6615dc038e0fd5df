"""A hub client survives a hub that sends garbage Yjs updates.

A small websocket server plays a faulty hub: it syncs a small state, then sends mutated
updates (``tests/fuzz_frames.py``) on every connection. The client's replica applies what
pycrdt takes and refuses the rest: a refused frame drops the connection, as for any bad
frame, and the client reconnects; nothing escapes into the agent's code, the replica stays
readable, and no error but the client's own "connection lost" warnings is logged.
"""

from __future__ import annotations

import logging
import random

import pytest
from fuzz_frames import mutate
from hubs import FAST, eventually
from pycrdt import Doc, Map
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

import sync
from sync.wire import protocol as p


def _plain(key: str, value: object) -> bytes:
    doc: Doc[Map[object]] = Doc(client_id=31337)
    doc.get("state", type=Map)[key] = value
    return doc.get_update()


class _GarbageHub:
    """Syncs ``{"ok": 1}``, then sends a few mutated updates on every connection."""

    def __init__(self) -> None:
        self.connections = 0
        self.sent = 0
        self.rng = random.Random(7)
        self.seeds = [_plain("ok", 1), _plain("more", [1, {"a": "b"}])]

    async def handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        await ws.send(p.encode_sync_step1(b"\x00"))
        try:
            async for data in ws:
                assert isinstance(data, bytes)
                if isinstance(p.decode_message(data), p.SyncStep1):
                    await ws.send(p.encode_sync_step2(self.seeds[0]))
                    for _ in range(5):
                        await ws.send(
                            p.encode_update(mutate(self.rng, self.rng.choice(self.seeds)))
                        )
                        self.sent += 1
        except ConnectionClosed:
            pass  # the client dropped a connection whose frame it refused


async def test_the_client_takes_or_refuses_a_hubs_garbage_and_stays_usable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = _GarbageHub()
    async with serve(fake.handle, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        url = f"ws://127.0.0.1:{port}/room"
        async with sync.connect(url, agent="a", reconnect=FAST) as remote:
            await eventually(lambda: fake.sent >= 200, timeout=30)  # many reconnections
            assert fake.connections > 3
            assert remote.get("ok") == 1  # the synced state is still read as it was
            remote.snapshot()  # and the whole replica can be read
    lost = "lost: unexpected data (InvalidUpdate"
    refused = [r for r in caplog.records if lost in r.getMessage()]
    assert refused and all(r.levelname == "WARNING" for r in refused)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors
