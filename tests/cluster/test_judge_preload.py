"""A judge preloaded while the holder's lease runs out: real Redis and PostgreSQL.

The contender loads the room read-only before it may claim it; after its claim it
replays only what the old owner committed since. These tests commit rows as the old
owner *after* the preload, then claim, and check the new owner has each of them exactly
once; that the preloaded state refuses writes before the claim; that a preload whose
rows were folded meanwhile falls back to a fresh load; and that a preload is dropped
(closed, never used) when the holder renews after all.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from bounded import bounded
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from crdt_state import CrdtStateError, SharedState
from crdt_state.errors import ReadOnlyStore, StateClosed
from crdt_state.postgres import load_stored, open_postgres
from crdt_state.takeover import preload, promote
from sync.server.cluster.ownership import Ownership, try_acquire
from sync.server.cluster.pgstorage import PostgresRoomStorage
from sync.server.cluster.preload import Preload, renewal_missed

Pool = AsyncConnectionPool[AsyncConnection[Any]]
TTL = 3.0  # long enough that a loaded machine never loses a lease by accident


class Node:
    """What :class:`PostgresRoomStorage` reads of a hub's node."""

    def __init__(self, dsn: str, pool: Pool) -> None:
        self.postgres_dsn = dsn
        self.pool = pool
        self.lease_ttl = TTL
        self.hub_id = "preload-test"


def put(state: SharedState, key: str, value: int) -> None:
    branch = state.fork("agent")
    branch.set(key, value)
    branch.merge()


async def take(redis: Redis, pool: Pool, room: str, hub: str) -> Ownership:
    got = await try_acquire(redis, pool, room, owner=hub, ttl=TTL)
    assert got is not None, f"{hub} could not take {room}"
    return got


def room_name() -> str:
    return f"preload/{uuid.uuid4().hex[:8]}"


def test_a_missed_renewal_is_a_lease_shorter_than_a_renewal_leaves_it() -> None:
    assert not renewal_missed(1.5, 1.5)
    assert not renewal_missed(1.2, 1.5)  # renewed every 0.25 s, a little late
    # renewed every 0.25 s, held back up to 0.125 s to go with others, and late
    assert not renewal_missed(1.0, 1.5)
    assert renewal_missed(0.9, 1.5)  # 0.6 s without a renewal
    assert renewal_missed(0.01, 1.5)
    assert not renewal_missed(0.0, 1.5)  # a key without expiry: no sign of a dead holder


async def test_rows_committed_after_the_preload_are_in_the_new_judge_exactly_once(
    redis: Redis, pool: Pool, postgres_dsn: str
) -> None:
    room = room_name()
    node = Node(postgres_dsn, pool)
    old_storage, new_storage = PostgresRoomStorage(node), PostgresRoomStorage(node)  # type: ignore[arg-type]
    old = await take(redis, pool, room, "hub-a")
    old_judge = await old_storage.open_judge(room, old, {})
    for i in range(5):
        await asyncio.to_thread(put, old_judge, f"early{i}", i)

    preloaded = await new_storage.preload(room, {})
    at_preload = preloaded.position
    with pytest.raises(ReadOnlyStore):  # no write before the claim
        await asyncio.to_thread(put, preloaded, "too-soon", 1)
    for i in range(7):  # the old owner goes on committing after the preload
        await asyncio.to_thread(put, old_judge, f"late{i}", i)
    assert preloaded.get("late0") is None

    await old.keeper.stop()  # the old owner dies: its lease goes
    await old.lease.release()
    new = await take(redis, pool, room, "hub-b")
    assert new.fence.value == old.fence.value + 1
    async with bounded(10, "promoting the preloaded judge"):
        judge = await new_storage.open_judge(room, new, {}, preloaded)
    try:
        assert judge is preloaded
        assert judge.position == at_preload + 7  # each late row replayed once
        fresh: SharedState = await asyncio.to_thread(
            open_postgres, postgres_dsn, room, read_only=True
        )
        try:
            assert judge.token == fresh.token
            assert judge.position == fresh.position
        finally:
            fresh.close()
        assert [judge.get(f"early{i}") for i in range(5)] == list(range(5))
        assert [judge.get(f"late{i}") for i in range(7)] == list(range(7))
        assert judge.get("too-soon") is None

        shared = await new_storage.writer()
        rounds = shared.rounds
        # the new judge writes, through the hub's shared writer like a freshly opened one
        await asyncio.to_thread(put, judge, "new-owner", 1)
        assert shared.rounds == rounds + 1
        with pytest.raises(CrdtStateError):  # the old one is fenced
            await asyncio.to_thread(put, old_judge, "stale", 1)
        stored = await asyncio.to_thread(load_stored, postgres_dsn, room)
        assert stored is not None
        seqs = [c.seq for c in stored.changes]
        assert len(seqs) == len(set(seqs)) == stored.changes[-1].seq - stored.snapshot_seq
        replica = SharedState(follower=True)
        replica.apply_update(stored.snapshot)
        for change in stored.changes:
            replica.apply_update(change.update)
        assert replica.get("new-owner") == 1 and replica.get("late6") == 6
        assert replica.get("stale") is None
    finally:
        await asyncio.to_thread(judge.close)
        await asyncio.to_thread(old_judge.close)
        await new.release()


async def test_a_preload_whose_rows_were_folded_is_replaced_by_a_fresh_load(
    redis: Redis, pool: Pool, postgres_dsn: str
) -> None:
    room = room_name()
    writer: SharedState = await asyncio.to_thread(
        open_postgres, postgres_dsn, room, before_commit=lambda conn, ticket: None, keep_history=1
    )
    await asyncio.to_thread(put, writer, "first", 1)
    early = await asyncio.to_thread(preload, postgres_dsn, room)
    for i in range(80):  # more than the log keeps: closing compacts past the preload
        await asyncio.to_thread(put, writer, f"k{i}", i)
    await asyncio.to_thread(writer.close)
    with pytest.raises(CrdtStateError) as refused:
        await asyncio.to_thread(promote, early, None, lock=False)
    assert refused.value.details.get("reason") == "reload"
    with pytest.raises(ReadOnlyStore):  # still refuses writes
        await asyncio.to_thread(put, early, "x", 1)
    await asyncio.to_thread(early.close)

    storage = PostgresRoomStorage(Node(postgres_dsn, pool))  # type: ignore[arg-type]
    again = await storage.preload(room, {})
    folding: SharedState = await asyncio.to_thread(
        open_postgres, postgres_dsn, room, before_commit=lambda conn, ticket: None, keep_history=1
    )
    for i in range(80, 160):  # folded again behind this preload's back
        await asyncio.to_thread(put, folding, f"k{i}", i)
    await asyncio.to_thread(folding.close)
    owner = await take(redis, pool, room, "hub-c")
    try:
        judge = await storage.open_judge(room, owner, {}, again)  # falls back: a fresh load
        try:
            assert judge is not again
            with pytest.raises(StateClosed):
                again.ensure_open()
            assert judge.get("first") == 1 and judge.get("k159") == 159
            await asyncio.to_thread(put, judge, "after", 1)
            assert judge.get("after") == 1
        finally:
            await asyncio.to_thread(judge.close)
    finally:
        await owner.release()


async def test_a_preload_is_dropped_unused_when_the_holder_renews(
    redis: Redis, pool: Pool, postgres_dsn: str
) -> None:
    room = room_name()
    storage = PostgresRoomStorage(Node(postgres_dsn, pool))  # type: ignore[arg-type]
    holder = await take(redis, pool, room, "hub-a")
    judge = await storage.open_judge(room, holder, {})
    await asyncio.to_thread(put, judge, "k", 1)
    loaded: list[SharedState] = []

    async def load() -> SharedState:
        state = await storage.preload(room, {})
        loaded.append(state)
        return state

    ahead = Preload(room, load)

    async def contend() -> None:
        got = await try_acquire(
            redis, pool, room, owner="hub-b", ttl=TTL, on_busy=lambda left: ahead.saw(left, TTL)
        )
        assert got is None, "the holder's lease is still running"

    try:
        await holder.keeper.stop()  # the holder stalls: no renewal
        async with bounded(TTL, "the contender seeing a missed renewal"):
            while not ahead.pending:
                await contend()
                await asyncio.sleep(0.05)
        async with bounded(TTL / 2, "the preload"):
            while not loaded:
                await asyncio.sleep(0.01)
        assert await holder.lease.renew()  # the holder renews after all
        await contend()
        assert not ahead.pending and ahead.dropped == 1
        assert await ahead.take() is None  # a claim now would load afresh
        async with bounded(5, "the dropped preload being closed"):
            while True:
                try:
                    loaded[0].ensure_open()
                except StateClosed:
                    break
                except ReadOnlyStore:
                    await asyncio.sleep(0.01)
    finally:
        await asyncio.to_thread(judge.close)
        await holder.lease.release()
