"""Mutated plain Yjs updates at one hub: each is applied or refused, never an internal error.

Garbage the hub's state applies can leave structs pending; a later update pycrdt cannot
merge with them used to escape as a raw ``ValueError``: the hub closed that session with
1011 and logged an internal error. Every refusal is now the session's own close (1003,
"update refused: ..."; 1008 for content outside the JSON model; 1002/1007 for frames
that do not decode), and the room keeps taking merges.
"""

from __future__ import annotations

import logging
import random

import pytest
from fuzz_frames import mutate, seed_frames
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from sync.client.remote import connect
from sync.server.hub import Hub
from sync.wire import protocol as p

INTERNAL_ERROR = 1011


async def test_garbage_updates_close_only_their_session_with_a_reason(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    url = hub.url("garbage")
    rng = random.Random(0)
    updates = seed_frames()[1:3]  # sync step 2 and update frames
    codes: list[int] = []
    async with connect(url, agent="good") as good:
        await good.acommit({"a": {"b": [1, "x"]}, "n": 3}, good.token)
        ws: ClientConnection = await ws_connect(url, compression=None)
        for n in range(1_500):
            try:
                await ws.send(mutate(rng, rng.choice(updates)))
                await ws.send(p.encode_sync_step1(b"\x00"))  # a probe: answered if still open
                while not isinstance(p.decode_message(await ws.recv(decode=False)), p.SyncStep2):
                    pass
            except ConnectionClosed as exc:
                codes.append(exc.rcvd.code if exc.rcvd is not None else 0)
                ws = await ws_connect(url, compression=None)
            if n % 250 == 0:
                result = await good.acommit({f"k{n}": n}, good.token)
                assert result.applied == ((f"k{n}",),)
        await ws.close()
        assert codes and INTERNAL_ERROR not in codes, sorted(set(codes))
        result = await good.acommit({"after": True}, good.token)
        assert result.applied == (("after",),)
    internal = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not internal, internal
