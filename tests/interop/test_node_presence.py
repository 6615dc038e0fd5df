"""Presence (awareness) of stock Yjs clients (y-websocket 1.5.4 in Node) through our hub.

A stock client sends back every awareness change it applies, other peers' states
included. The hub kept one payload per connection, so such an echo replaced the echoing
client's own state: with alice and bob connected and carol joining then leaving, a later
dave saw nobody, the inspector listed no agent, and a client's disconnect removed peers
it had only echoed. The hub now keeps one state per client, by clock, and removes on a
disconnect only the clients that connection announced.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect as ws_connect
from yjs_node import NodeYjsClient

from sync.client.remote import RemoteState, connect
from sync.server.hub import Hub

pytestmark = pytest.mark.interop


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Run the blocking ``check`` on a thread until it is true (``timeout`` s at most)."""
    async with asyncio.timeout(timeout):
        while not await asyncio.to_thread(check):
            await asyncio.sleep(0.05)


async def stock(hub: Hub, room: str, name: str) -> NodeYjsClient:
    """A stock client in ``room`` whose awareness state is ``{"user": {"name": name}}``."""
    client = await asyncio.to_thread(NodeYjsClient, f"ws://{hub.host}:{hub.port}", room)
    await asyncio.to_thread(client.set_awareness, {"user": {"name": name}})
    return client


def names(states: dict[int, Any]) -> set[str]:
    """The names in awareness states: a stock client's user, or an agent's name."""
    out: set[str] = set()
    for state in states.values():
        if isinstance(state, dict):
            user = state.get("user")
            out.add(user["name"] if isinstance(user, dict) else state.get("agent", "?"))
    return out


def sees(client: NodeYjsClient, *who: str) -> Callable[[], bool]:
    return lambda: names(client.peers()) == set(who)


def room_names(hub: Hub, room: str) -> set[str]:
    """The names of the clients whose state the hub's room holds."""
    awareness = hub.rooms[room].awareness
    return names({e.client: json.loads(e.state) for e in awareness.states.entries()})


async def close_all(*clients: NodeYjsClient) -> None:
    for client in clients:
        await asyncio.to_thread(client.close)


async def test_a_late_joiner_sees_the_clients_still_there(hub: Hub) -> None:
    """The trial's scenario, as the reference server shows it."""
    room = "presence/late"
    alice = await stock(hub, room, "alice")
    bob = await stock(hub, room, "bob")
    clients = [alice, bob]
    try:
        await until(sees(alice, "bob"))
        await until(sees(bob, "alice"))
        carol = await stock(hub, room, "carol")
        clients.append(carol)
        await until(sees(alice, "bob", "carol"))
        await until(sees(bob, "alice", "carol"))
        await asyncio.to_thread(carol.close)
        await until(sees(alice, "bob"))
        await until(sees(bob, "alice"))
        dave = await stock(hub, room, "dave")
        clients.append(dave)
        await until(sees(dave, "alice", "bob"))
        assert room_names(hub, room) == {"alice", "bob", "dave"}
        # each connection controls its own client, and only it
        awareness = hub.rooms[room].awareness
        for client in (alice, bob, dave):
            owner = awareness.owner(client.client_id)
            assert owner is not None and awareness.controlled(owner) == {client.client_id}
    finally:
        await close_all(*clients)


async def test_a_client_that_echoes_others_removes_only_itself_when_it_drops(hub: Hub) -> None:
    room = "presence/echo"
    alice = await stock(hub, room, "alice")
    bob = await stock(hub, room, "bob")
    try:
        await until(sees(bob, "alice"))
        # bob applies alice's new state and sends it back to the hub (an echo)
        await asyncio.to_thread(alice.set_awareness, {"user": {"name": "alice", "busy": True}})
        await until(lambda: any(s.get("user", {}).get("busy") for s in bob.peers().values()))
        await asyncio.sleep(0.2)  # the echo has reached the hub
        await asyncio.to_thread(bob.kill)  # no goodbye: the hub removes what bob controlled
        await until(sees(alice))
        assert room_names(hub, room) == {"alice"}
        dave = await stock(hub, room, "dave")
        try:
            await until(sees(dave, "alice"))
        finally:
            await asyncio.to_thread(dave.close)
    finally:
        await close_all(alice, bob)


async def test_python_agents_see_stock_clients_and_each_other(hub: Hub) -> None:
    room = "presence/python"
    url = hub.url(room)
    async with connect(url, agent="watcher") as watcher:
        alice = await stock(hub, room, "alice")
        try:
            async with connect(url, agent="planner") as planner:
                await until(lambda: names(watcher.peers) == {"alice", "planner"})
                assert watcher.presence.client not in watcher.peers  # its own is left out
                (state,) = [s for s in watcher.peers.values() if s.get("agent") == "planner"]
                assert state["status"] == "idle" and state == planner.presence.state
                assert names(planner.peers) == {"alice", "watcher"}
                await until(sees(alice, "watcher", "planner"))  # and the stock client them
                # a change of presence reaches the others
                branch = planner.fork()
                await until(lambda: _status(watcher, "planner") == "editing")
                branch.discard()
            await until(lambda: names(watcher.peers) == {"alice"})
            await until(sees(alice, "watcher"))
        finally:
            await asyncio.to_thread(alice.close)
        await until(lambda: watcher.peers == {})


def _status(remote: RemoteState, agent: str) -> Any:
    for state in remote.peers.values():
        if isinstance(state, dict) and state.get("agent") == agent:
            return state.get("status")
    return None


async def test_the_inspector_lists_each_client_once(hub: Hub) -> None:
    room = "presence/inspector"
    alice = await stock(hub, room, "alice")
    bob = await stock(hub, room, "bob")
    try:
        async with connect(hub.url(room), agent="planner") as planner:
            await until(sees(alice, "bob", "planner"))
            await until(sees(bob, "alice", "planner"))
            # echoes: each stock client sends back the others' changes
            await asyncio.to_thread(alice.set_awareness, {"user": {"name": "alice", "n": 2}})
            await until(lambda: any(s.get("user", {}).get("n") for s in bob.peers().values()))
            await asyncio.sleep(0.2)
            feed_url = f"ws://{hub.host}:{hub.port}/inspect/{room}/feed"
            async with ws_connect(feed_url) as feed, asyncio.timeout(10):
                while True:
                    event = json.loads(await feed.recv())
                    if event["type"] == "agents":
                        break
            agents = event["agents"]
            assert sorted(a["client"] for a in agents) == sorted(
                [alice.client_id, bob.client_id, planner.presence.client]
            )
            assert names({a["client"]: a["state"] for a in agents}) == {"alice", "bob", "planner"}
            connections = [a["connection"] for a in agents]
            assert len(set(connections)) == 3 and None not in connections
            by_client = {a["client"]: a for a in agents}
            assert by_client[alice.client_id]["state"] == {"user": {"name": "alice", "n": 2}}
    finally:
        await close_all(alice, bob)
