"""A stock Yjs client (y-websocket 1.5.4 in Node) on a hub that follows a room it does not own.

Two hubs of one cluster (the machine's Redis, a throwaway PostgreSQL database): hub A
owns the room (its client opened it first), hub B serves it from its replica, which it
keeps current by applying A's ``out`` entries (several of one read as one update). A
stock client joining B gets the full state from B's replica (sync step 1), sees what A's
agent merges afterwards, and its own write reaches A's agent; one joining while A's agent
merges (B sends followed updates before its replica has them) ends with every merge.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import hubs
import pytest
from psycopg import AsyncConnection
from yjs_node import NodeYjsClient

from sync import Hub
from sync.client.remote import connect
from sync.server.cluster import migrate

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture
async def cluster(throwaway_postgres: str) -> AsyncIterator[tuple[Hub, Hub]]:
    async with await AsyncConnection.connect(throwaway_postgres, autocommit=True) as conn:
        await migrate(conn)
    redis = os.environ.get("CRDT_STATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
    async with (
        Hub(port=0, redis=redis, postgres=throwaway_postgres) as a,
        Hub(port=0, redis=redis, postgres=throwaway_postgres) as b,
    ):
        yield a, b


def eventually(check: Callable[[], bool]) -> Awaitable[None]:
    return hubs.eventually(check, timeout=15.0)


def base_url(hub: Hub) -> str:
    return f"ws://{hub.host}:{hub.port}"


async def test_a_stock_client_on_a_following_hub_gets_the_full_state(
    cluster: tuple[Hub, Hub],
) -> None:
    a, b = cluster
    room = f"interop/follow-{secrets.token_hex(4)}"
    expected = {f"k{n}": n for n in range(30)}
    async with connect(a.url(room), agent="py") as py:
        await py.acommit({"opened": True}, py.token)
        # several merges at once: A's owner publishes them in one or more entries, which
        # B's follower applies (one update per read)
        async with connect(b.url(room), agent="watcher") as watcher:
            await asyncio.gather(*(py.acommit({k: v}, py.token) for k, v in expected.items()))
            await eventually(lambda: all(watcher.get(k) == v for k, v in expected.items()))
        node = await asyncio.to_thread(NodeYjsClient, base_url(b), room)
        try:
            assert await asyncio.to_thread(node.wait, "k29", 29)
            state = await asyncio.to_thread(node.get)
            assert {k: state.get(k) for k in expected} == expected and state["opened"] is True
            await py.acommit({"later": "from A"}, py.token)
            assert await asyncio.to_thread(node.wait, "later", "from A")
            await asyncio.to_thread(node.set, "from_node", [1, 2, 3])
            await eventually(lambda: py.get("from_node") == [1, 2, 3])
        finally:
            await asyncio.to_thread(node.close)


async def test_a_stock_client_joining_a_following_hub_mid_burst_gets_every_merge(
    cluster: tuple[Hub, Hub],
) -> None:
    """B sends followed updates to its sessions before its replica has them (it applies
    them before the replica is read): a stock client whose sync falls in the middle of a
    burst of A's merges still ends with every merge, as does B's replica."""
    a, b = cluster
    room = f"interop/burst-{secrets.token_hex(4)}"
    async with connect(a.url(room), agent="py") as py:
        await py.acommit({"opened": True}, py.token)
        synced = asyncio.Event()

        async def burst() -> int:
            n = more = 0
            while more < 50:  # until 50 merges after the stock client synced
                await py.acommit({f"k{n}": n}, py.token)
                n += 1
                more += synced.is_set()
            return n

        merging = asyncio.create_task(burst())
        await asyncio.sleep(0.1)
        node = await asyncio.to_thread(NodeYjsClient, base_url(b), room)
        try:
            synced.set()
            count = await merging
            assert count > 60  # merges before, during and after its sync
            assert await asyncio.to_thread(node.wait, f"k{count - 1}", count - 1)
            state = await asyncio.to_thread(node.get)
            assert state == py.snapshot() and len(state) == count + 1
            cluster_node = b._cluster
            assert cluster_node is not None
            assert cluster_node.rooms[room].room.state.snapshot() == py.snapshot()
        finally:
            await asyncio.to_thread(node.close)
