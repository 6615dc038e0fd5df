"""A remote agent reads its own queued and in-flight merges, and never conflicts with itself.

Real hubs on loopback (stopped and started again on the same port and files),
real SQLite ``local`` files.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hubs import FAST, RestartableHub, eventually

from crdt_state import BrokenChain, ConflictError, resolvers
from sync.client.remote import RemoteState, connect


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RestartableHub]:
    running = RestartableHub(tmp_path / "hub.db")
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def increment(remote: RemoteState) -> int:
    """One read-modify-write step; returns the value the step read."""
    async with remote.fork() as branch:
        seen = branch.get("n")
        branch.set("n", seen + 1)
    return int(seen)


async def test_offline_increments_read_each_other_and_all_land(
    hub: RestartableHub, tmp_path: Path
) -> None:
    url = hub.url("rmw/offline")
    async with connect(url, agent="a", local=tmp_path / "a.sqlite", reconnect=FAST) as remote:
        await remote.acommit({"n": 0}, remote.token)
        await hub.stop()
        await eventually(lambda: not remote.connected)
        seen = [await increment(remote) for _ in range(3)]
        assert seen == [0, 1, 2]  # each fork reads the merges queued before it
        assert remote.get("n") == 3 and remote.snapshot() == {"n": 3}
        assert remote.replica.get("n") == 0  # the replica holds only what the hub confirmed
        snapshot, token = remote.read()
        assert snapshot == {"n": 3} and token == remote.token
        assert remote.pending == 3
        await hub.start()
        await remote.wait_idle()
        assert await hub.state("rmw/offline") == {"n": 3}
        assert remote.get("n") == 3 and remote.failed == [] and remote.conflicted == []


async def test_offline_status_changes_do_not_conflict_with_each_other(
    hub: RestartableHub, tmp_path: Path
) -> None:
    url = hub.url("rmw/status")
    async with connect(url, agent="a", local=tmp_path / "a.sqlite", reconnect=FAST) as remote:
        await remote.acommit({"status": "new"}, remote.token)
        await hub.stop()
        await eventually(lambda: not remote.connected)
        for status in ("triaged", "resolved"):
            async with remote.fork() as branch:
                branch.set("status", status)
            assert remote.get("status") == status
        await hub.start()
        await remote.wait_idle()
        assert await hub.state("rmw/status") == {"status": "resolved"}
        assert remote.get("status") == "resolved" and remote.failed == []


async def test_queued_merges_survive_a_client_restart_with_their_chain(
    hub: RestartableHub, tmp_path: Path
) -> None:
    url = hub.url("rmw/restart")
    local = tmp_path / "a.sqlite"
    async with connect(url, agent="a", local=local, reconnect=FAST) as remote:
        await remote.acommit({"n": 0, "log": []}, remote.token)
        await hub.stop()
        await eventually(lambda: not remote.connected)
        await increment(remote)
        await increment(remote)
    async with connect(url, agent="a", local=local, reconnect=FAST, timeout=0.2) as remote:
        assert not remote.connected and remote.pending == 2
        assert remote.get("n") == 2  # the overlay comes back from the local file
        assert await increment(remote) == 2
        await hub.start()
        await remote.wait_idle()
        assert (await hub.state("rmw/restart"))["n"] == 3 and remote.failed == []


async def test_in_flight_merges_are_read_at_once_and_never_flicker(tmp_path: Path) -> None:
    hub = RestartableHub(tmp_path / "hub.db")
    await hub.start()
    url = hub.url("rmw/flight")
    try:
        async with connect(url, agent="a") as remote:
            await remote.acommit({"n": 0}, remote.token)
            seen: list[int] = []
            sampling = True

            async def sample() -> None:
                while sampling:
                    seen.append(remote.get("n"))
                    await asyncio.sleep(0)

            sampler = asyncio.create_task(sample())
            tasks = []
            for i in range(20):  # each fork reads the merges still in flight before it
                branch = remote.fork()
                assert branch.get("n") == i
                branch.set("n", i + 1)
                tasks.append(asyncio.create_task(branch.amerge()))
                await asyncio.sleep(0)  # the merge is submitted (and on its way)
            results = await asyncio.gather(*tasks)
            sampling = False
            await sampler
            assert await hub.state("rmw/flight") == {"n": 20}
            assert all(not r.pending and r.conflicts == () for r in results)
            assert seen == sorted(seen) and seen[-1] == 20  # never back to an older value
    finally:
        await hub.stop()


async def test_a_concurrent_writer_is_combined_by_the_agents_policy(
    hub: RestartableHub, tmp_path: Path
) -> None:
    url = hub.url("rmw/counter")
    local = tmp_path / "a.sqlite"
    counting = {"n": resolvers.counter}
    async with connect(url, agent="a", local=local, reconnect=FAST, resolvers=counting) as a:
        await a.acommit({"n": 0}, a.token)
        await hub.stop()
        for _ in range(3):
            await increment(a)
    await hub.start()
    async with connect(url, agent="b", resolvers=counting) as b:  # while a is away
        for _ in range(2):
            await increment(b)
    async with connect(url, agent="a", local=local, reconnect=FAST, resolvers=counting) as a:
        await a.wait_idle()
        assert await hub.state("rmw/counter") == {"n": 5}
        assert a.failed == []
        assert [c.path for c in a.conflicted] == [("n",)] * 3  # each step met b's writes
        await eventually(lambda: a.get("n") == 5)


async def test_a_refused_merge_takes_the_merges_built_on_it_along(
    hub: RestartableHub, tmp_path: Path
) -> None:
    url = hub.url("rmw/refused")
    local = tmp_path / "a.sqlite"
    async with connect(url, agent="a", local=local, reconnect=FAST) as a:
        await a.acommit({"status": "new", "other": 0}, a.token)
        await hub.stop()
        for status in ("triaged", "resolved"):
            async with a.fork() as branch:
                branch.set("status", status)
        async with a.fork() as branch:  # independent of the status chain
            branch.set("other", 1)
    await hub.start()
    async with connect(url, agent="b") as b:  # b gets there first
        await b.acommit({"status": "closed"}, b.token)
    async with connect(url, agent="a", local=local, reconnect=FAST) as a:
        await a.wait_idle()
        assert await hub.state("rmw/refused") == {"status": "closed", "other": 1}
        first, second = a.failed
        assert isinstance(first, ConflictError) and first.conflicts[0].path == ("status",)
        assert isinstance(second, BrokenChain) and second.code == "broken_chain"
        assert a.snapshot() == {"status": "closed", "other": 1}  # the overlay dropped them


async def test_read_and_acommit_chain_like_forks(hub: RestartableHub, tmp_path: Path) -> None:
    url = hub.url("rmw/occ")
    async with connect(url, agent="a", local=tmp_path / "a.sqlite", reconnect=FAST) as remote:
        await remote.acommit({"n": 0}, remote.token)
        await hub.stop()
        await eventually(lambda: not remote.connected)
        for _ in range(3):
            snapshot, token = remote.read()
            await remote.acommit({"n": snapshot["n"] + 1}, token)
        # a plain token names no chain: this write is judged against the confirmed
        # state alone, and conflicts with the agent's own queued merges
        await remote.acommit({"n": 100}, remote.token)
        await hub.start()
        await remote.wait_idle()
        assert await hub.state("rmw/occ") == {"n": 3}
        (refused,) = remote.failed
        assert isinstance(refused, ConflictError)


async def test_a_waiting_caller_gets_the_chain_failure(hub: RestartableHub) -> None:
    """Online: the second merge is in flight when the first is refused; both callers hear."""
    url = hub.url("rmw/online")
    async with connect(url, agent="a") as a, connect(url, agent="b") as b:
        await a.acommit({"s": "x"}, a.token)
        await eventually(lambda: b.get("s") == "x")
        first = a.fork()
        second_fork_base = a.fork()  # forked before the first merge: no chain
        await b.acommit({"s": "from-b"}, b.token)
        first.set("s", "one")
        task = asyncio.create_task(first.amerge())
        await asyncio.sleep(0)
        second = a.fork()
        assert second.get("s") == "one"  # reads the merge in flight
        second.set("s", "two")
        with pytest.raises(ConflictError):
            await task
        with pytest.raises(BrokenChain):
            await second.amerge()
        second_fork_base.set("t", 1)
        await second_fork_base.amerge()
        assert a.failed == []  # the callers were told; nothing is left for `failed`
        assert await hub.state("rmw/online") == {"s": "from-b", "t": 1}


async def test_rebase_moves_a_branch_over_the_agents_newer_merges(
    hub: RestartableHub, tmp_path: Path
) -> None:
    url = hub.url("rmw/rebase")
    async with connect(url, agent="a", local=tmp_path / "a.sqlite", reconnect=FAST) as remote:
        await remote.acommit({"n": 0, "log": []}, remote.token)
        await hub.stop()
        await eventually(lambda: not remote.connected)
        slow = remote.fork()
        slow.append("log", "slow")
        assert slow.get("n") == 0
        await increment(remote)  # merged while `slow` was open
        slow.rebase()
        assert slow.get("n") == 1 and slow.get("log") == ["slow"]
        slow.set("n", slow.get("n") + 1)
        await slow.amerge()
        assert remote.snapshot() == {"n": 2, "log": ["slow"]}
        await hub.start()
        await remote.wait_idle()
        assert await hub.state("rmw/rebase") == {"n": 2, "log": ["slow"]}
        assert remote.failed == []
