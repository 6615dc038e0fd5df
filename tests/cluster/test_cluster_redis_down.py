"""Redis gone while clients come and go: a transient outage, told as one (real servers).

Found trying a Redis restart as a user: a hub opening a room while Redis was down closed
the connection with 1011 (internal error, a traceback in its log), and a client counts
1011 against its oldest unanswered merge: after three such reconnections during one
outage the merge failed (``hub_internal_error``), and every queued merge built on it
with it (``broken_chain``). An outage is 1013 (try again later) now, which costs a
client nothing but the reconnection.
"""

from __future__ import annotations

import asyncio

import pytest
from cluster_servers import RedisServer
from outages import assert_try_again_later
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import sync
from crdt_state import Retry
from sync import Hub

FAST = Retry(attempts=1, base_delay=0.01, max_delay=0.05)


async def test_a_room_opened_while_redis_is_down_is_try_again_later(
    hubs: tuple[Hub, Hub], private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    _, b = hubs
    private_redis.kill()
    await assert_try_again_later(b.url("never-opened"), caplog, "cannot serve")


async def test_queued_merges_survive_reconnections_during_a_redis_outage(
    hubs: tuple[Hub, Hub], private_redis: RedisServer
) -> None:
    a, b = hubs
    room = "outage"
    async with sync.connect(
        [a.url(room), b.url(room)], agent="w", reconnect=FAST, timeout=10
    ) as remote:
        async with remote.fork() as branch:
            branch["k0"] = 0
        private_redis.kill()

        async def restart_later() -> None:
            await asyncio.sleep(1.5)  # the client reconnects to both hubs meanwhile
            await asyncio.to_thread(private_redis.start)

        restarter = asyncio.create_task(restart_later())
        pending = 0
        for i in range(1, 201):  # merging on through the outage
            branch = remote.fork()
            branch[f"k{i}"] = i
            pending += (await branch.amerge()).pending
            await asyncio.sleep(0.005)
        await restarter
        assert pending, "no merge waited for the outage"
        await remote.wait_idle(60)
        assert remote.failed == [] and remote.conflicted == []
    async with sync.connect(b.url(room), agent="reader", timeout=10) as reader:
        assert reader.snapshot() == {f"k{i}": i for i in range(201)}


async def test_a_client_that_sent_much_is_closed_at_once(
    hubs: tuple[Hub, Hub], private_redis: RedisServer
) -> None:
    """A reconnecting client sends its queued merges before the hub reads any: more than
    the connection queues (64), and the hub that gave up on the room stopped reading, so
    the client's answer to the close waited behind them for the close timeout (10 s on
    both sides, seen as a client's flush that "stopped ... in 10.002 s"). The hub reads
    and drops them while it closes now."""
    _, b = hubs
    private_redis.kill()
    loop = asyncio.get_running_loop()
    async with ws_connect(b.url("never-opened"), compression=None, close_timeout=30) as ws:
        for _ in range(200):  # the hub's handler fails before it reads a message
            await ws.send(b"\\x01" * 64)
        started = loop.time()
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), 30)
        await ws.wait_closed()
    assert ws.close_code == 1013
    assert loop.time() - started < 3.0
