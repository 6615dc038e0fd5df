"""Agents bursting merges at a cluster of hub processes while something fails.

:class:`Burst` agents spread over the hubs increment one counter (the ``counter`` policy
adds concurrent increments) as fast as they can; :func:`run_burst` runs the failure in
the middle. Every merge an agent got acknowledged (or queued and later sent) must be in
the final counter exactly once: :func:`final_counter` (through a hub) and
:func:`stored_counter` (PostgreSQL itself) say what the room holds.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import psycopg
import redis as redis_sync
from hub_procs import HubCluster, HubProcess

from crdt_state import resolvers
from crdt_state.postgres import load_stored
from sync import connect
from sync.client import RemoteState
from sync.server.cluster import KeySpace
from sync.server.cluster.keys import OWNER

__all__ = [
    "COUNTER",
    "Burst",
    "assert_counted_once",
    "final_counter",
    "key_space",
    "owner_of",
    "report",
    "run_burst",
    "stored_counter",
    "wait_for_owner",
]

COUNTER = {"calls": resolvers.counter}


def key_space(dsn: str) -> KeySpace:
    """The Redis key space of the cluster whose hubs keep their rooms in ``dsn``."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("SELECT id FROM crdt_cluster").fetchone()
    assert row is not None, "the database has no cluster id: no hub migrated it yet"
    return KeySpace(str(row[0]))


def owner_of(redis_url: str, room: str, hubs: HubCluster) -> HubProcess | None:
    """The hub process holding ``room``'s lease (its pid is in the lease token)."""
    key = key_space(hubs[0].postgres).key(room, OWNER)
    client = redis_sync.Redis.from_url(redis_url, socket_timeout=2)
    try:
        token = client.get(key)
    finally:
        client.close()
    if token is None:
        return None
    assert isinstance(token, bytes)  # a client without decode_responses
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
    burst.stop.set()
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    except TimeoutError:  # where is each hub stuck? (only now: see dump_stacks)
        for hub in hubs.hubs:
            hub.dump_stacks()
        raise
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


def report(what: str, burst: Burst, at: float) -> None:
    """Print what the burst went through: merges, and the longest gap after ``at``."""
    print(
        f"{what}: {burst.acked} merges acknowledged, {burst.queued} queued; longest time "
        f"without an acknowledgement: {burst.longest_gap(at):.2f} s"
    )


async def assert_counted_once(
    burst: Burst, hubs: list[HubProcess], dsn: str, room: str, *, continued_after: float
) -> None:
    """Every merge made is in the counter exactly once, through each of ``hubs`` and in
    PostgreSQL; and merges were acknowledged again 3 s after ``continued_after``."""
    assert any(t > continued_after + 3 for t in burst.ack_times), "merges did not continue"
    for hub in hubs:
        assert await final_counter(hub, room) == burst.merges, hub.name
    assert await asyncio.to_thread(stored_counter, dsn, room) == burst.merges
