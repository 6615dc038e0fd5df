"""Mutated plain Yjs updates at one hub: each is applied or refused, never an internal error.

Garbage the hub's state applies can leave structs pending; a later update pycrdt cannot
merge with them used to escape as a raw ``ValueError``: the hub closed that session with
1011 and logged an internal error. Every refusal is now the session's own close (1003,
"update refused: ..."; 1008 for content outside the JSON model; 1002/1007 for frames
that do not decode), and the room keeps taking merges. After the garbage, a stock Yjs
peer loads the room's whole document, reads what the agents read, and its own update
lands (garbage pycrdt integrated half-way, at wrapped clocks or past a hole once left
the room sending a document peers read otherwise, or refusing their updates).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import pytest
from fuzz_frames import seed_frames, send_mutated
from hubs import eventually
from pycrdt import Doc, Map
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from yjs_writes import built_on, one_update_per_write

from crdt_state._document import doc_snapshot
from crdt_state._waiting import MAX_HELD_BYTES
from sync.client.remote import RemoteState, connect
from sync.server.hub import Hub
from sync.server.observe.pages import room_list
from sync.wire import protocol as p

INTERNAL_ERROR = 1011


async def test_garbage_updates_close_only_their_session_with_a_reason(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    url = hub.url("garbage")
    updates = seed_frames()[1:3]  # sync step 2 and update frames
    async with connect(url, agent="good") as good:
        await good.acommit({"a": {"b": [1, "x"]}, "n": 3}, good.token)

        async def merge_now_and_then(n: int) -> None:
            if n % 250 == 0:
                result = await good.acommit({f"k{n}": n}, good.token)
                assert result.applied == ((f"k{n}",),)

        run = await send_mutated(url, random.Random(0), updates, 1_500, between=merge_now_and_then)
        codes = [code for code, _ in run.closes]
        assert codes and INTERNAL_ERROR not in codes, sorted(set(codes))
        result = await good.acommit({"after": True}, good.token)
        assert result.applied == (("after",),)
        await _a_stock_peer_loads_the_room_and_lands(url, good)
    internal = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not internal, internal


async def _a_stock_peer_loads_the_room_and_lands(url: str, good: RemoteState) -> None:
    async with ws_connect(url, compression=None) as ws:
        await ws.send(p.encode_sync_step1(b"\x00"))
        while not isinstance(message := p.decode_message(await ws.recv(decode=False)), p.SyncStep2):
            pass
        peer: Doc[Any] = Doc(client_id=99)
        peer.apply_update(message.update)
        assert doc_snapshot(peer) == good.snapshot()
        before = peer.get_state()
        peer.get("state", type=Map)["from_stock_peer"] = 1
        await ws.send(p.encode_update(peer.get_update(before)))
        await eventually(lambda: good.get("from_stock_peer") == 1)


async def test_a_stock_peers_updates_out_of_order_wait_and_land(hub: Hub) -> None:
    # pycrdt alone integrates the second update past a hole and never shows a = 3
    url = hub.url("order")
    updates = one_update_per_write(77, [("a", 1), ("b", 2), ("a", 3)])
    async with connect(url, agent="agent") as agent, ws_connect(url, compression=None) as ws:
        for update in (updates[1], updates[2]):
            await ws.send(p.encode_update(update))
        await ws.send(p.encode_sync_step1(b"\x00"))  # answered once both are dealt with
        while not isinstance(p.decode_message(await ws.recv(decode=False)), p.SyncStep2):
            pass
        assert agent.snapshot() == {}
        # an operator sees them held: the hub, its metrics, its room list
        held = len(updates[1]) + len(updates[2])
        assert hub.held_bytes("order") == held
        assert f"crdt_state_held_update_bytes {held:.1f}" in hub.inspector.metrics.render().decode()
        assert [r["held_bytes"] for r in room_list(hub) if r["name"] == "order"] == [held]
        await ws.send(p.encode_update(updates[0]))
        await eventually(lambda: agent.snapshot() == {"a": 3, "b": 2})
        assert hub.held_bytes("order") == 0
        assert "crdt_state_held_update_bytes 0.0" in hub.inspector.metrics.render().decode()


async def test_a_peer_flooding_writes_built_on_nothing_seen_is_refused_the_room_goes_on(
    hub: Hub,
) -> None:
    # each under a new client id, so none waits for its own earlier clocks: the room held
    # them all and tried every later update with them, dearer each time
    source: Doc[Any] = Doc(client_id=1)
    source.get("state", type=Map)["note"] = "never sent"
    base = source.get_update()
    url = hub.url("flood")
    async with connect(url, agent="good") as good, ws_connect(url, compression=None) as ws:
        with pytest.raises(ConnectionClosed) as info:
            for client in range(100, 1_000):  # ~2 KB each: the bound is passed long before
                await ws.send(p.encode_update(built_on(base, client, "note", "x" * 2000)))
            async with asyncio.timeout(10):
                while True:  # the greeting, then the close
                    await ws.recv()
        assert info.value.rcvd is not None and "update refused" in info.value.rcvd.reason
        assert 0 < hub.held_bytes("flood") <= MAX_HELD_BYTES
        result = await good.acommit({"after": True}, good.token)
        assert result.applied == (("after",),)
