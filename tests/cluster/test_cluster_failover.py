"""A cluster losing its room owner: real hub processes, SIGKILL and SIGSTOP.

Agents spread over three hubs increment one counter (the ``counter`` policy adds
concurrent increments) as fast as they can; the owner of the room is killed (or paused
past its lease) in the middle. Every merge an agent got acknowledged must be in the final
counter exactly once, and the room must serve again within a few seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis as redis_sync
from cluster_servers import RedisServer
from hub_procs import HubCluster, HubProcess

from crdt_state import resolvers
from crdt_state.postgres import load_stored
from sync import connect
from sync.client import RemoteState
from sync.server.cluster import room_key

pytestmark = pytest.mark.slow

COUNTER = {"calls": resolvers.counter}


@pytest.fixture
def three_hubs(
    private_redis: RedisServer, postgres_dsn: str, tmp_path: Path
) -> Iterator[HubCluster]:
    with HubCluster(private_redis.url, postgres_dsn, tmp_path, 3) as cluster:
        yield cluster
        print(cluster.logs())


def owner_of(redis_url: str, room: str, hubs: HubCluster) -> HubProcess | None:
    """The hub process holding ``room``'s lease (its pid is in the lease token)."""
    client = redis_sync.Redis.from_url(redis_url, socket_timeout=2)
    try:
        token = client.get(room_key(room, "owner"))
    finally:
        client.close()
    if token is None:
        return None
    pid = int(token.decode().split("#")[0].split(":")[1])
    return next((h for h in hubs.hubs if h.proc is not None and h.proc.pid == pid), None)


async def wait_for_owner(redis_url: str, room: str, hubs: HubCluster) -> HubProcess:
    for _ in range(500):
        owner = owner_of(redis_url, room, hubs)
        if owner is not None:
            return owner
        await asyncio.sleep(0.02)
    raise AssertionError(f"room {room} never got an owner\n{hubs.logs()}")


class Burst:
    """Agents incrementing ``calls``; acknowledged merges and their times."""

    def __init__(self) -> None:
        self.acked = 0
        self.ack_times: list[float] = []
        self.queued = 0
        self.stop = asyncio.Event()

    async def agent(self, urls: list[str], name: str) -> None:
        async with connect(urls, agent=name, resolvers=COUNTER, timeout=30) as remote:
            while not self.stop.is_set():
                await self.increment(remote)
            await remote.wait_idle(timeout=30)

    async def increment(self, remote: RemoteState) -> None:
        branch = remote.fork()
        branch.set("calls", (branch.get("calls") or 0) + 1)
        try:
            result = await asyncio.wait_for(branch.amerge(), 30)
        except TimeoutError:
            raise AssertionError(
                f"{remote.agent}: a merge was not answered in 30 s (hub {remote.url}, "
                f"connected: {remote.connected}, pending: {remote.pending})"
            ) from None
        if result.pending:  # queued while the agent was between hubs: sent on reconnection
            self.queued += 1
            await asyncio.sleep(0.05)  # not a busy loop while offline
            return
        assert result.applied == (("calls",),)
        self.acked += 1
        self.ack_times.append(time.monotonic())

    @property
    def merges(self) -> int:
        """Every merge made: acknowledged, or queued and (after ``wait_idle``) sent."""
        return self.acked + self.queued

    def longest_gap(self, start: float) -> float:
        """The longest time without an acknowledgement from ``start`` on (seconds)."""
        times = [start] + [t for t in self.ack_times if t > start]
        return max(b - a for a, b in itertools.pairwise(times)) if len(times) > 1 else 0.0


async def run_burst(
    hubs: HubCluster, room: str, event: object, *, agents_per_hub: int = 2
) -> tuple[Burst, float]:
    """Start the agents, run ``event()`` after a moment, keep going; (burst, event time)."""
    assert callable(event)
    burst = Burst()
    tasks = []
    for i, hub in enumerate(hubs.hubs):
        urls = [hub.url(room)] + [h.url(room) for h in hubs.hubs if h is not hub]
        for j in range(agents_per_hub):
            tasks.append(asyncio.create_task(burst.agent(urls, f"agent-{i}-{j}")))
    await asyncio.sleep(1.0)
    assert burst.acked > 0, hubs.logs()
    at = time.monotonic()
    await asyncio.to_thread(event)
    await asyncio.sleep(6.0)
    for hub in hubs.hubs:
        hub.dump_stacks()
    burst.stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return burst, at


async def final_counter(hub: HubProcess, room: str) -> object:
    async with connect(hub.url(room), agent="reader") as reader:
        return reader.get("calls")


def stored_counter(dsn: str, room: str) -> object:
    """The counter as PostgreSQL holds it (a state rebuilt from the stored log)."""
    from crdt_state import SharedState

    stored = load_stored(dsn, room)
    assert stored is not None
    state = SharedState(follower=True)
    state.apply_update(stored.snapshot)
    for change in stored.changes:
        state.apply_update(change.update)
    return state.get("calls")


async def test_owner_killed_during_a_burst(
    three_hubs: HubCluster, private_redis: RedisServer, postgres_dsn: str
) -> None:
    room = "burst/kill"
    owner: list[HubProcess] = []

    def kill_owner() -> None:
        found = owner_of(private_redis.url, room, three_hubs)
        assert found is not None
        owner.append(found)
        found.kill()

    burst, killed_at = await run_burst(three_hubs, room, kill_owner)
    survivor = next(h for h in three_hubs.hubs if h is not owner[0])
    new_owner = await wait_for_owner(private_redis.url, room, three_hubs)
    assert new_owner is not owner[0]
    assert any(t > killed_at + 3 for t in burst.ack_times), "merges did not continue"
    print(
        f"owner killed: {burst.acked} merges acknowledged, {burst.queued} queued during "
        f"failover; longest time without an acknowledgement: {burst.longest_gap(killed_at):.2f} s"
    )
    assert await final_counter(survivor, room) == burst.merges
    assert await asyncio.to_thread(stored_counter, postgres_dsn, room) == burst.merges
    with psycopg.connect(postgres_dsn) as conn:
        row = conn.execute("SELECT fence FROM crdt_rooms WHERE room = %s", (room,)).fetchone()
    assert row is not None and row[0] >= 2  # the takeover claimed a new fence
    # the new owner loaded the judge while the dead owner's lease ran out (a missed
    # renewal), and only caught up after its claim
    assert f"room {room!r}: preloaded judge caught up" in new_owner.log.read_text(), (
        three_hubs.logs()
    )


async def test_owner_paused_past_its_lease(
    three_hubs: HubCluster, private_redis: RedisServer, postgres_dsn: str
) -> None:
    room = "burst/pause"
    paused: list[HubProcess] = []

    def pause_owner() -> None:
        found = owner_of(private_redis.url, room, three_hubs)
        assert found is not None
        paused.append(found)
        found.pause()
        try:
            time.sleep(4.0)  # twice the lease: another hub takes the room meanwhile
            taker = owner_of(private_redis.url, room, three_hubs)
            assert taker is not None and taker is not found, "nobody took the room over"
        finally:
            found.resume()

    burst, paused_at = await run_burst(three_hubs, room, pause_owner)
    old = paused[0]
    print(
        f"owner paused: {burst.acked} merges acknowledged, {burst.queued} queued; longest "
        f"time without an acknowledgement: {burst.longest_gap(paused_at):.2f} s"
    )
    assert old.alive
    for _ in range(100):  # the resumed hub notices on its first turn that its lease is gone
        if "stepping down" in old.tail(200):
            break
        await asyncio.sleep(0.05)
    assert "stepping down" in old.tail(200), old.tail()
    for hub in three_hubs.hubs:  # every hub, the resumed one too, converged
        assert await final_counter(hub, room) == burst.merges
    assert await asyncio.to_thread(stored_counter, postgres_dsn, room) == burst.merges


async def test_redis_restarted_then_everything_restarted(
    three_hubs: HubCluster, private_redis: RedisServer, postgres_dsn: str
) -> None:
    room = "burst/redis"
    burst, restarted_at = await run_burst(three_hubs, room, private_redis.restart)
    print(
        f"redis restarted: {burst.acked} merges acknowledged, {burst.queued} queued; longest "
        f"time without an acknowledgement: {burst.longest_gap(restarted_at):.2f} s"
    )
    assert any(t > restarted_at + 3 for t in burst.ack_times), "merges did not continue"
    for hub in three_hubs.hubs:
        assert await final_counter(hub, room) == burst.merges
    assert await asyncio.to_thread(stored_counter, postgres_dsn, room) == burst.merges
    # everything down (hubs and Redis, which keeps nothing), then up again: PostgreSQL
    # brings the room back
    three_hubs.stop()
    private_redis.restart()
    three_hubs.start()
    assert await final_counter(three_hubs[1], room) == burst.merges
    async with connect(three_hubs[2].url(room), agent="after", resolvers=COUNTER) as after:
        await after.acommit({"calls": burst.merges + 1}, after.token)
    assert await final_counter(three_hubs[0], room) == burst.merges + 1
