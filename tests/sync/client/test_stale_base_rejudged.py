"""A merge queued across a hub restart, whose base the restarted hub no longer retains.

A restarted hub (or a cluster's new owner after failover) starts its change history at
its stored snapshot: a queued merge forked before other writers' later changes has a base
older than that, and the hub refuses it with ``stale_base``. The client then judges it
again against what the agent saw (as for a broken chain) and sends it again: the merge
lands, and so do the agent's later merges that were chained on it. Before this, the merge
failed, and every later merge of the agent built on it failed with ``broken_chain`` (an
agent conflicting with itself).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from hubs import FAST, RestartableHub, eventually

from crdt_state import Branch, resolvers
from sync.client.remote import RemoteState

ROOM = "stale/room"
CHURN = 1_400
"""More changes than a durable room keeps as history (1,000 plus its margin): the hub
folds the older ones into its snapshot, and a restart starts its history there."""


async def _churn(hub: RestartableHub, key: str) -> None:
    """:data:`CHURN` changes by another writer, each setting ``key`` to a new number."""
    assert hub.hub is not None
    state = (await hub.hub.room(ROOM)).state
    for i in range(CHURN):

        def write(b: Branch, i: int = i) -> None:
            b.set(key, i)

        await state.atransact(write, agent="churn")


async def _remote(hub: RestartableHub, agent: str, **options: object) -> RemoteState:
    remote = RemoteState(hub.url(ROOM), agent=agent, reconnect=FAST, **options)  # type: ignore[arg-type]
    await remote.start(timeout=5)
    return remote


async def test_a_queued_merge_with_a_stale_base_and_its_chain_land(tmp_path: Path) -> None:
    hub = RestartableHub(tmp_path / "hub.db")
    await hub.start()
    agent = await _remote(hub, "a")
    other = await _remote(hub, "b")
    try:
        branch = agent.fork()  # its base: the room before the churn
        await _churn(hub, "b")
        await hub.stop()  # the restarted hub's history starts after b's writes
        await eventually(lambda: not agent.connected)
        branch.set("mine", 1)
        first = await branch.amerge()
        assert first.pending
        later = agent.fork()  # built on the queued merge: chained to it
        assert later.get("mine") == 1
        later.set("mine", 2)
        assert (await later.amerge()).pending
        await hub.start()
        await agent.wait_idle()
        assert agent.failed == []
        assert (await hub.state(ROOM)) == {"b": CHURN - 1, "mine": 2}
    finally:
        await agent.close()
        await other.close()
        await hub.stop()


async def test_a_stale_base_still_meets_the_other_writers_changes(tmp_path: Path) -> None:
    """Judged again, a stale merge conflicts with what others wrote since the agent saw it:
    the agent's policy settles it (a counter adds both increments); nothing is lost."""
    hub = RestartableHub(tmp_path / "hub.db")
    await hub.start()
    counting = {"n": resolvers.counter}
    agent = await _remote(hub, "a", resolvers=counting)
    other = await _remote(hub, "b", resolvers=counting)
    try:
        async with agent.fork() as seed:
            seed["n"] = 0
        await eventually(lambda: other.get("n") == 0)
        branch = agent.fork()
        for _ in range(2):
            async with other.fork() as b:
                b["n"] = b["n"] + 1
        await _churn(hub, "c")
        await hub.stop()
        await eventually(lambda: not agent.connected)
        branch["n"] = branch["n"] + 1
        assert (await branch.amerge()).pending
        await hub.start()
        await agent.wait_idle()
        assert agent.failed == []
        assert (await hub.state(ROOM))["n"] == 3
    finally:
        await agent.close()
        await other.close()
        await hub.stop()


async def test_merges_queued_across_many_restarts_all_land(tmp_path: Path) -> None:
    """The cluster benchmark's loop (fork, set own key, amerge) across hub restarts."""
    hub = RestartableHub(tmp_path / "hub.db")
    await hub.start()
    stop = asyncio.Event()
    agents = [await _remote(hub, f"a{i}") for i in range(3)]
    last: dict[str, int] = {}

    async def loop(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            branch = agents[i].fork()
            branch.set(f"a{i}", n)
            result = await branch.amerge()
            last[f"a{i}"] = n
            if result.pending:
                await asyncio.sleep(0.005)

    tasks = [asyncio.create_task(loop(i)) for i in range(len(agents))]
    try:
        for _ in range(4):
            await asyncio.sleep(0.15)
            await hub.stop()
            await asyncio.sleep(0.05)
            await hub.start()
        await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*tasks)
        for a in agents:
            await a.wait_idle()
        assert [a.failed for a in agents] == [[], [], []]
        assert (await hub.state(ROOM)) == last
    finally:
        stop.set()
        for a in agents:
            await a.close()
        await hub.stop()


async def test_a_queued_merge_and_a_replica_both_older_than_the_history(tmp_path: Path) -> None:
    """The agent's local file keeps a queued merge and a replica from before the churn: the
    first judgement again is on that old replica, is refused as stale again, and is judged
    again until the replica caught up; the merge lands, once."""
    hub = RestartableHub(tmp_path / "hub.db")
    local = tmp_path / "a.sqlite"
    await hub.start()
    agent = await _remote(hub, "a", local=local)
    await hub.stop()
    await eventually(lambda: not agent.connected)
    branch = agent.fork()
    branch.set("mine", 1)
    assert (await branch.amerge()).pending
    await agent.close()  # the merge waits in the local file
    await hub.start()
    await _churn(hub, "b")
    await hub.stop()
    await hub.start()  # its history starts after the churn
    agent = await _remote(hub, "a", local=local)
    try:
        await agent.wait_idle()
        assert agent.failed == []
        assert (await hub.state(ROOM)) == {"b": CHURN - 1, "mine": 1}
        await eventually(lambda: agent.get("mine") == 1 and agent.get("b") == CHURN - 1)
    finally:
        await agent.close()
        await hub.stop()
