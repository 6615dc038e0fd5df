"""A stock Yjs client's write the owner could not apply yet is not lost with the owner.

A Yjs document may also sync through another provider (WebRTC, IndexedDB): a stock
client's write can then depend on an update the hub never saw. The room's owner holds
such a write (in memory, as Yjs does) until what it depends on arrives. When the owner
dies, or Redis restarts and the judges are loaded again, what an owner held is gone; the
client does not know, and a stock client never sends a write twice. Every hub therefore
asks its sessions for what they hold beyond the room (sync step 1, which y-websocket
answers with the difference) whenever the room's judge may have lost something: a new
owner, a replica loaded again. Real hub processes, a real Redis, the Node y-websocket
client.
"""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from bursts import wait_for_owner
from cluster_servers import RedisServer
from hub_procs import HubCluster, HubProcess
from hubs import eventually
from pycrdt import Doc, Map

from sync import connect
from sync.client.remote import RemoteState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from yjs_node import NodeYjsClient

pytestmark = pytest.mark.slow


def side_update(key: str, value: str) -> bytes:
    """A write to the room's ``state`` map by a peer the hub never hears from."""
    doc: Doc[Any] = Doc()
    state: Map[str] = Map()
    doc["state"] = state
    state[key] = value
    return doc.get_update()


def held_bytes(hub: HubProcess) -> float:
    """The hub's ``crdt_state_held_update_bytes`` gauge, read from its ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{hub.port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    line = next(x for x in text.splitlines() if x.startswith("crdt_state_held_update_bytes "))
    return float(line.split()[1])


async def held_write(room: str, agent: RemoteState, node_hub: HubProcess) -> NodeYjsClient:
    """A Node client on ``node_hub`` whose last write the owner holds (its base unseen)."""
    node = await asyncio.to_thread(NodeYjsClient, node_hub.base, room)
    assert await asyncio.to_thread(node.wait, "task", "summarise", 10)
    await asyncio.to_thread(node.sideload, side_update("note", "from another provider"))
    await asyncio.to_thread(node.set, "note", "edited on top")
    # the edit waits for the write it builds on (and so does every later write of that
    # client: a Yjs client's writes apply in the order it made them)
    await asyncio.sleep(1.0)
    assert agent.get("note") is None
    return node


@pytest.mark.parametrize("fate", ["killed", "paused"])
async def test_the_owners_held_write_comes_back_from_the_client_after_the_owner_is_gone(
    two_hubs: HubCluster, private_redis: RedisServer, fate: str
) -> None:
    room = f"resync/owner-{fate}"
    a, b = two_hubs[0], two_hubs[1]
    async with connect(a.url(room), agent="python") as first:
        await first.acommit({"task": "summarise"}, first.token)
    owner = await wait_for_owner(private_redis.url, room, two_hubs)
    other = b if owner is a else a
    async with connect(other.url(room), agent="watcher") as agent:
        node = await held_write(room, agent, other)
        try:
            # the owner's judge holds it (the other hub's replica never sees it)
            assert await asyncio.to_thread(held_bytes, owner) > 0
            assert await asyncio.to_thread(held_bytes, other) == 0
            if fate == "killed":
                owner.kill()
            else:  # past its lease: deposed, then back
                owner.pause()
            # the client on the surviving hub is asked again and sends what the room lacks
            await eventually(lambda: agent.get("note") == "edited on top", 15)
            await asyncio.to_thread(node.set, "after", "the failover")
            await eventually(lambda: agent.get("after") == "the failover", 10)
            assert (await asyncio.to_thread(node.get))["note"] == "edited on top"
        finally:
            await asyncio.to_thread(node.close)
    if fate == "paused":
        owner.resume()  # the deposed hub follows the new owner: it has the write too
        async with connect(owner.url(room), agent="back", timeout=20) as back:
            await eventually(lambda: back.get("after") == "the failover", 15)
            assert back.get("note") == "edited on top"
    async with connect(other.url(room), agent="late") as late:
        assert late.get("note") == "edited on top"


async def test_a_held_write_comes_back_after_redis_restarted(
    two_hubs: HubCluster, private_redis: RedisServer
) -> None:
    room = "resync/redis-restarted"
    a, b = two_hubs[0], two_hubs[1]
    async with connect(a.url(room), agent="python") as agent:
        await agent.acommit({"task": "summarise"}, agent.token)
        node = await held_write(room, agent, b)
        try:
            private_redis.restart()
            await eventually(lambda: agent.get("note") == "edited on top", 15)
            assert (await asyncio.to_thread(node.get))["note"] == "edited on top"
        finally:
            await asyncio.to_thread(node.close)
