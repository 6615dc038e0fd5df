"""What trying the hub as a user found: each test failed on the code before its fix."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect as ws_connect

from crdt_state import VersionVector
from sync.server.hub import Hub
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange


async def test_a_lone_surrogate_in_a_merge_is_refused_as_a_value_not_a_failed_write() -> None:
    """It reached pycrdt, which panicked (a Rust backtrace on stderr per message) and the
    merge was answered ``write_failed``."""
    async with Hub(port=0) as hub:
        async with ws_connect(f"ws://127.0.0.1:{hub.port}/r", compression=None) as ws:
            change = WireChange(ChangeKind.SET, ("k",), "SURRSU")  # as long as "\ud800"
            frame = p.encode_merge_request(1, "agent", VersionVector().to_state(), [change])
            await ws.send(frame.replace(b'"SURRSU"', b'"\\ud800"'))  # JSON's escape of it
            reply = None
            async with asyncio.timeout(5):
                while not isinstance(reply, p.MergeReply):
                    data = await ws.recv()
                    assert isinstance(data, bytes)
                    reply = p.decode_message(data)
        assert reply.error is not None and reply.error.code == "unsupported_value"
        # the code travels apart: a client showed "[unsupported_value]: [unsupported_value]"
        assert reply.error.message.startswith("at 'k': a string holds a lone surrogate")
        assert hub.rooms["r"].state.snapshot() == {}
