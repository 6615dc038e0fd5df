"""The hub's awareness, seen from raw websocket peers: one state per client, by clock.

Each connection controls the clients whose state it set; an echo of another client's
state (what a stock y-websocket client sends back) changes nothing and controls nothing;
a closing connection removes only what it controls; a late joiner gets every state in
one update. Real hubs on loopback; the stock Node client's cases are in
``tests/interop/test_node_presence.py``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hubs import eventually
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from sync.server._awareness import MAX_CLIENTS_PER_CONNECTION
from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.wire import protocol as p
from sync.wire.awareness import Entry, decode_entries, encode_entries


def update(*entries: tuple[int, int, str]) -> bytes:
    """An awareness message carrying ``entries`` (client, clock, state JSON)."""
    return p.encode_awareness(encode_entries(Entry(*e) for e in entries))


async def next_awareness(ws: ClientConnection, timeout: float = 5.0) -> list[Entry]:
    """The entries of the next awareness message ``ws`` receives."""
    async with asyncio.timeout(timeout):
        while True:
            message = p.decode_message(await ws.recv())  # type: ignore[arg-type]
            if isinstance(message, p.Awareness):
                return decode_entries(message.payload)


async def no_awareness(ws: ClientConnection, wait: float = 0.3) -> None:
    """``ws`` receives no awareness message within ``wait`` seconds."""
    with pytest.raises(TimeoutError):
        got = await next_awareness(ws, wait)
        pytest.fail(f"unexpected awareness {got}")


async def joined(hub: Hub, room: str, count: int) -> None:
    await eventually(lambda: room in hub.rooms and len(hub.rooms[room].sessions) == count)


async def test_an_echo_neither_changes_nor_takes_over_a_client(hub: Hub) -> None:
    url = hub.url("echo")
    async with ws_connect(url) as alice, ws_connect(url) as bob, ws_connect(url) as carol:
        await joined(hub, "echo", 3)
        await alice.send(update((1, 3, '{"n":"alice"}')))
        assert await next_awareness(carol) == [(1, 3, '{"n":"alice"}')]
        # bob announces itself and sends back alice's state, as a stock client does
        await bob.send(update((2, 1, '{"n":"bob"}'), (1, 3, '{"n":"alice"}')))
        assert await next_awareness(carol) == [(2, 1, '{"n":"bob"}')]  # only what changed
        room = hub.rooms["echo"]
        owner = room.awareness.owner
        assert owner(1) != owner(2) and room.awareness.controlled(owner(2) or -1) == {2}
        await bob.close()
        assert await next_awareness(carol) == [(2, 1, "null")]  # bob's own, at its clock
        await eventually(lambda: len(room.sessions) == 2)
        async with ws_connect(url) as dave:
            assert await next_awareness(dave) == [(1, 3, '{"n":"alice"}')]
        # alice got bob's state and its removal, nothing of her own echoed back
        assert await next_awareness(alice) == [(2, 1, '{"n":"bob"}')]
        assert await next_awareness(alice) == [(2, 1, "null")]
        await no_awareness(alice)


async def test_a_state_is_taken_only_with_a_newer_clock(hub: Hub) -> None:
    url = hub.url("clocks")
    async with ws_connect(url) as alice, ws_connect(url) as watcher:
        await joined(hub, "clocks", 2)
        await alice.send(update((1, 0, '{"v":0}')))  # unknown client at clock 0: as y-protocols
        await alice.send(update((1, 5, '{"v":5}')))
        assert await next_awareness(watcher) == [(1, 5, '{"v":5}')]
        await alice.send(update((1, 4, '{"v":4}'), (1, 5, '{"v":"same clock"}')))
        await no_awareness(watcher)
        await alice.send(update((1, 6, '{"v":6}')))
        assert await next_awareness(watcher) == [(1, 6, '{"v":6}')]
        await alice.send(update((1, 6, "null")))  # equal clock, null: removed
        assert await next_awareness(watcher) == [(1, 6, "null")]
        await alice.send(update((1, 6, '{"v":"late echo"}')))  # its clock is known: refused
        await no_awareness(watcher)
        assert len(hub.rooms["clocks"].awareness) == 0


async def test_a_newer_state_from_another_connection_moves_its_control(hub: Hub) -> None:
    """A client that reconnected on a new connection while the old one lingers."""
    url = hub.url("moved")
    async with ws_connect(url) as watcher, ws_connect(url) as old:
        await old.send(update((1, 1, '{"on":"old"}')))
        assert await next_awareness(watcher) == [(1, 1, '{"on":"old"}')]
        async with ws_connect(url) as new:
            await new.send(update((1, 2, '{"on":"new"}')))
            assert await next_awareness(watcher) == [(1, 2, '{"on":"new"}')]
            await old.close()
            await joined(hub, "moved", 2)
            await no_awareness(watcher)  # the old connection controls nothing now
            assert hub.rooms["moved"].awareness.greeting() == [
                encode_entries([Entry(1, 2, '{"on":"new"}')])
            ]
        assert await next_awareness(watcher) == [(1, 2, "null")]


async def test_a_late_joiner_gets_every_state_in_one_update(hub: Hub) -> None:
    url = hub.url("greeting")
    async with ws_connect(url) as alice, ws_connect(url) as bob:
        await alice.send(update((1, 1, '{"n":"alice"}')))
        await bob.send(update((2, 4, '{"n":"bob"}'), (3, 1, '{"n":"bob\'s tab"}')))
        await eventually(lambda: len(hub.rooms["greeting"].awareness) == 3)
        async with ws_connect(url) as dave:
            assert await next_awareness(dave) == [
                (1, 1, '{"n":"alice"}'),
                (2, 4, '{"n":"bob"}'),
                (3, 1, '{"n":"bob\'s tab"}'),
            ]
            await dave.send(p.encode_query_awareness())  # the same, asked for
            assert len(await next_awareness(dave)) == 3


async def closed_with(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(5):
            while True:
                await ws.recv()
    return info.value.rcvd.code if info.value.rcvd is not None else None


async def test_a_connection_controls_a_bounded_number_of_clients(hub: Hub) -> None:
    url = hub.url("many")
    cap = MAX_CLIENTS_PER_CONNECTION
    async with ws_connect(url) as watcher:
        async with ws_connect(url) as many:
            await many.send(update(*[(100 + i, 1, "{}") for i in range(cap)]))
            assert len(await next_awareness(watcher)) == cap
            # updating those it controls, or removing one and adding another, is fine
            await many.send(update((100, 2, "null"), (999, 1, "{}"), (101, 2, '{"x":1}')))
            assert len(await next_awareness(watcher)) == 3
            await many.send(update((1000, 1, "{}")))  # one more: refused, closed (1009)
            assert await closed_with(many) == 1009
        removal = await next_awareness(watcher)
        assert {e.client for e in removal} == {*range(101, 100 + cap), 999}
        assert all(e.removed for e in removal)
        assert 1000 not in {e.client for e in removal}  # the refused update applied nothing
        async with ws_connect(url) as too_many:  # refused whole, even from the start
            await too_many.send(update(*[(2000 + i, 1, "{}") for i in range(cap + 1)]))
            assert await closed_with(too_many) == 1009
        await no_awareness(watcher)
        await eventually(lambda: len(hub.rooms["many"].sessions) == 1)
        assert len(hub.rooms["many"].awareness) == 0


async def test_the_states_one_connection_sets_are_bounded_in_bytes_too() -> None:
    """One state may be as large as ``max_awareness``; many of them from one connection
    (one message each) would hold ``64 x max_awareness`` of the room's memory."""
    async with Hub(port=0, limits=Limits(max_awareness=4096)) as hub:
        url = hub.url("big")
        big = json.dumps({"blob": "x" * 2100})
        async with ws_connect(url) as watcher, ws_connect(url) as many:
            await many.send(update((1, 1, big)))
            await many.send(update((1, 2, big)))  # a newer state replaces the older one
            assert [e.clock for e in await next_awareness(watcher)] == [1]
            assert [e.clock for e in await next_awareness(watcher)] == [2]
            await many.send(update((2, 1, big)))  # two such states: over 4,096 bytes
            assert await closed_with(many) == 1009
            removal = await next_awareness(watcher)
            assert [(e.client, e.removed) for e in removal] == [(1, True)]


@pytest.mark.parametrize("payload", [b"\x05", b"\x01\x01\x01\x05ab", b"\x00\x00"])
async def test_a_malformed_awareness_update_closes_its_sender(hub: Hub, payload: bytes) -> None:
    url = hub.url("malformed")
    async with ws_connect(url) as watcher, ws_connect(url) as sender:
        await sender.send(p.encode_awareness(payload))
        assert await closed_with(sender) == 1002
        await no_awareness(watcher)  # nothing relayed (it was, as it was, before)


async def test_agents_in_the_inspector_feed_are_listed_once(hub: Hub) -> None:
    url = hub.url("feed")
    async with ws_connect(url) as alice, ws_connect(url) as bob:
        await alice.send(update((1, 1, '{"user":"alice"}')))
        await bob.send(update((2, 1, '{"user":"bob"}'), (1, 1, '{"user":"alice"}')))
        await eventually(lambda: len(hub.rooms["feed"].awareness) == 2)
        feed_url = f"ws://{hub.host}:{hub.port}/inspect/feed/feed"
        async with ws_connect(feed_url) as feed, asyncio.timeout(5):
            event: dict[str, Any] = {}
            while event.get("type") != "agents":
                event = json.loads(await feed.recv())
        owner = hub.rooms["feed"].awareness.owner
        assert event["agents"] == [
            {"client": 1, "connection": f"conn-{owner(1)}", "state": {"user": "alice"}},
            {"client": 2, "connection": f"conn-{owner(2)}", "state": {"user": "bob"}},
        ]
