"""Awareness across the hubs of a cluster: each hub applies the others' by clock.

Two hubs in this process serve one room on a private redis-server and the module's
throwaway PostgreSQL database. A hub keeps the states of the other hubs' clients in the
room's awareness (controlled by none of its own connections), so a client joining it
later sees them in its greeting; an echo of them by one of its connections takes none
over; they go when the other hub publishes their removal (their connection closed).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from sync import Hub, connect
from sync.wire import protocol as p
from sync.wire.awareness import Entry, decode_entries, encode_entries

pytestmark = pytest.mark.slow


async def until(check: Any, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


def agents(peers: dict[int, Any]) -> set[str]:
    return {s["agent"] for s in peers.values() if isinstance(s, dict) and "agent" in s}


async def awareness_of(ws: ClientConnection, client: int) -> list[Entry]:
    """The entries about ``client`` of the next awareness message that has some."""
    async with asyncio.timeout(10):
        while True:
            message = p.decode_message(await ws.recv())  # type: ignore[arg-type]
            if isinstance(message, p.Awareness):
                mine = [e for e in decode_entries(message.payload) if e.client == client]
                if mine:
                    return mine


async def test_awareness_crosses_hubs_and_leaves_with_its_connection(
    hubs: tuple[Hub, Hub],
) -> None:
    a, b = hubs
    room = "aware/cluster"
    async with ws_connect(b.url(room)) as watcher:  # keeps the room open on b
        async with connect(a.url(room), agent="alice") as alice:
            me = alice.presence.client
            assert (await awareness_of(watcher, me))[0].state != "null"
            assert b.rooms[room].awareness.owner(me) is None  # no connection of b's
            async with connect(b.url(room), agent="bob") as bob:
                # bob joined b after alice's state crossed over: it was in its greeting
                await until(lambda: agents(bob.peers) == {"alice"})
                await until(lambda: agents(alice.peers) == {"bob"})
                # a connection of b echoes alice's state, as a stock client does: nothing
                # changes and b's connection takes nothing over
                held = b.rooms[room].awareness.states.get(me)
                assert held is not None
                async with ws_connect(b.url(room)) as echo:
                    await echo.send(p.encode_awareness(encode_entries([held])))
                    await echo.send(p.encode_awareness(encode_entries([Entry(5, 1, "{}")])))
                    await until(lambda: 5 in a.rooms[room].awareness.states)
                    assert b.rooms[room].awareness.owner(me) is None
                    assert a.rooms[room].awareness.owner(me) is not None
                await until(lambda: 5 not in a.rooms[room].awareness.states)  # echo left b
                assert me in a.rooms[room].awareness.states
                assert me in b.rooms[room].awareness.states
            await until(lambda: agents(alice.peers) == set())  # bob left b
        # alice left a: its removal crossed over at the clock it had
        (removal,) = await awareness_of(watcher, me)
        assert removal == Entry(me, held.clock, "null")
        assert me not in b.rooms[room].awareness.states
