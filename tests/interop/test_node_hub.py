"""Stock Yjs clients (y-websocket 1.5.4 in Node) and Python agents in one room of our hub."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import hubs
import pytest
from yjs_node import NodeHarnessError, NodeYjsClient

from crdt_state import ConflictError
from sync.client.remote import connect
from sync.server.auth import mint_token
from sync.server.hub import Hub

pytestmark = pytest.mark.interop

SECRET = "interop-secret"


def eventually(check: Callable[[], bool]) -> Awaitable[None]:
    """Node clients are slower to start: wait up to 10 s."""
    return hubs.eventually(check, timeout=10.0)


def base_url(hub: Hub) -> str:
    return f"ws://{hub.host}:{hub.port}"


async def test_node_and_python_agents_share_a_room(hub: Hub) -> None:
    async with connect(hub.url("interop/shared"), agent="py") as py:
        await py.acommit({"from_python": 1, "contested": "base"}, py.token)
        node = await asyncio.to_thread(NodeYjsClient, base_url(hub), "interop/shared")
        try:
            # Python's merge is visible to the stock client
            assert await asyncio.to_thread(node.wait, "from_python", 1)
            # the stock client's write reaches Python agents and the hub
            await asyncio.to_thread(node.set, "from_node", {"text": "hi", "n": [1, 2]})
            await eventually(lambda: py.get("from_node") == {"text": "hi", "n": [1, 2]})
            # a Python branch forked before a Node write to the same key gets its conflict
            branch = py.fork()
            await asyncio.to_thread(node.set, "contested", "node")
            await eventually(lambda: py.get("contested") == "node")
            branch.set("contested", "python")
            with pytest.raises(ConflictError) as info:
                await branch.amerge()
            (conflict,) = info.value.conflicts
            assert (conflict.base, conflict.current, conflict.incoming) == (
                "base",
                "node",
                "python",
            )
            # ... and resolving it in Python's favour reaches Node
            await branch.amerge(resolvers={"contested": "python wins"})
            assert await asyncio.to_thread(node.wait, "contested", "python wins")
            state = await asyncio.to_thread(node.get)
            assert state == hub.rooms["interop/shared"].state.snapshot()
        finally:
            await asyncio.to_thread(node.close)


async def test_two_node_clients_through_our_hub(hub: Hub) -> None:
    one = await asyncio.to_thread(NodeYjsClient, base_url(hub), "interop/two")
    two = await asyncio.to_thread(NodeYjsClient, base_url(hub), "interop/two")
    try:
        await asyncio.to_thread(one.set, "k", "v")
        assert await asyncio.to_thread(two.wait, "k", "v")
        await asyncio.to_thread(two.delete, "k")
        await eventually(lambda: "k" not in hub.rooms["interop/two"].state.snapshot())
        async with asyncio.timeout(10):
            while "k" in await asyncio.to_thread(one.get):
                await asyncio.sleep(0.01)
    finally:
        await asyncio.to_thread(one.close)
        await asyncio.to_thread(two.close)


async def test_node_client_with_token_param() -> None:
    async with Hub(port=0, secret=SECRET) as hub:
        token = mint_token(SECRET, "interop/*", "write", 60)
        node = await asyncio.to_thread(NodeYjsClient, base_url(hub), "interop/secured", token=token)
        try:
            await asyncio.to_thread(node.set, "ok", True)
            await eventually(lambda: hub.rooms["interop/secured"].state.get("ok") is True)
        finally:
            await asyncio.to_thread(node.close)
        with pytest.raises(NodeHarnessError):
            await asyncio.to_thread(
                NodeYjsClient, base_url(hub), "interop/secured", token="forged.token", timeout=3
            )


async def test_a_read_only_node_client_that_writes_stays_connected_and_reads() -> None:
    """Found as a user: closed with 1008, y-websocket reconnected at once and sent its write
    again, ~10 times a second for as long as it ran. Now its write is dropped, it is told
    once, and it keeps reading the room."""
    async with Hub(port=0, secret=SECRET) as hub:
        writer = mint_token(SECRET, "interop/*", "write", 60)
        reader = mint_token(SECRET, "interop/*", "read", 60)
        room = "interop/read-only"
        async with connect(hub.url(room), agent="w", token=writer) as w:
            await w.acommit({"a": 1}, w.token)
            node = await asyncio.to_thread(NodeYjsClient, base_url(hub), room, token=reader)
            try:
                await asyncio.to_thread(node.set, "mine", "dropped")
                await asyncio.sleep(1.5)  # a closed client would have come back ~15 times
                closes = (await asyncio.to_thread(node.command, op="closes"))["closes"]
                assert closes == []
                await w.acommit({"b": 2}, w.token)
                assert await asyncio.to_thread(node.wait, "b", 2)
            finally:
                await asyncio.to_thread(node.close)
        assert hub.rooms[room].state.snapshot() == {"a": 1, "b": 2}
