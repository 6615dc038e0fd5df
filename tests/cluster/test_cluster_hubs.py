"""Several real hub processes serving the same rooms on Redis and PostgreSQL.

Each test starts its hubs (``python -m sync.cli hub --redis ... --postgres ...``) on a
private redis-server and the module's throwaway database, and stops every process at the
end. Agents are real websocket clients; the stock Yjs client is the Node y-websocket one.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from hub_procs import HubCluster

from crdt_state import ConflictError
from sync import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from yjs_node import NodeYjsClient

pytestmark = pytest.mark.slow


async def until(check: object, timeout: float = 10.0) -> float:
    """Seconds until ``check()`` is true; fails after ``timeout``."""
    assert callable(check)
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not true after {timeout} s")
        await asyncio.sleep(0.002)
    return time.monotonic() - start


async def test_a_merge_on_one_hub_is_seen_on_the_other(two_hubs: HubCluster) -> None:
    a, b = two_hubs[0], two_hubs[1]
    room = "merge/seen"
    async with (
        connect(a.url(room), agent="on-a") as on_a,
        connect(b.url(room), agent="on-b") as on_b,
    ):
        delays = []
        for i in range(20):
            await on_a.acommit({"n": i, ("log", f"k{i}"): i}, on_a.token)
            delays.append(await until(lambda i=i: on_b.get("n") == i))
        print(f"cross-hub visibility after ack: max {max(delays) * 1000:.1f} ms")
        # the banner names where the rooms live: PostgreSQL, not a --db directory
        assert "rooms stored in PostgreSQL" in a.log.read_text()
        async with on_b.fork() as branch:
            branch.set("from_b", True)
        await until(lambda: on_a.get("from_b") is True)
        assert on_a.snapshot() == on_b.snapshot()
        assert on_a.get("n") == 19 and on_b.get(("log", "k7")) == 7


async def test_the_same_scalar_from_the_same_base_on_two_hubs_is_a_conflict(
    two_hubs: HubCluster,
) -> None:
    a, b = two_hubs[0], two_hubs[1]
    room = "merge/conflict"
    async with (
        connect(a.url(room), agent="on-a") as on_a,
        connect(b.url(room), agent="on-b") as on_b,
    ):
        await on_a.acommit({"status": "new"}, on_a.token)
        await until(lambda: on_b.get("status") == "new")
        base_a, base_b = on_a.token, on_b.token
        assert base_a == base_b
        first = await on_a.acommit({"status": "a"}, base_a)
        assert first.applied == (("status",),)
        with pytest.raises(ConflictError) as info:
            await on_b.acommit({"status": "b"}, base_b)
        (conflict,) = info.value.conflicts
        assert conflict.path == ("status",)
        assert (conflict.current, conflict.incoming) == ("a", "b")
        await until(lambda: on_b.get("status") == "a")
        assert on_a.get("status") == on_b.get("status") == "a"


async def test_a_stock_yjs_client_on_hub_b_sees_and_writes(two_hubs: HubCluster) -> None:
    a, b = two_hubs[0], two_hubs[1]
    room = "interop/cluster"
    async with connect(a.url(room), agent="python") as agent:
        await agent.acommit({"task": "summarise"}, agent.token)
        node = await asyncio.to_thread(NodeYjsClient, b.base, room)
        try:
            assert await asyncio.to_thread(node.wait, "task", "summarise", 10)
            base = agent.token
            await asyncio.to_thread(node.set, "owner", "node")
            await until(lambda: agent.get("owner") == "node")
            # the node client's write was judged by the owner: a merge from the old base
            # that writes the same key conflicts
            with pytest.raises(ConflictError) as info:
                await agent.acommit({"owner": "python"}, base)
            assert info.value.conflicts[0].path == ("owner",)
            await agent.acommit({"done": True}, agent.token)
            assert await asyncio.to_thread(node.wait, "done", True, 10)
            state = await asyncio.to_thread(node.get)
            assert state == {"task": "summarise", "owner": "node", "done": True}
        finally:
            await asyncio.to_thread(node.close)
