"""A room this test owns: its lease and fence taken, its judge open on PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from crdt_state import SharedState
from crdt_state.postgres import open_postgres
from sync.server.cluster.keys import room_key
from sync.server.cluster.ownership import Ownership, try_acquire
from sync.server.cluster.pgstorage import PositionHook
from sync.server.cluster.streamio import Entry, read_all
from sync.server.cluster.streams import decode_out


async def owned_judge(
    redis: Redis, pool: AsyncConnectionPool[AsyncConnection[Any]], dsn: str, room: str
) -> tuple[Ownership, SharedState]:
    """Take ``room`` (owner ``test``, a 10 s lease) and open its judge fenced by the claim."""
    ownership = await try_acquire(redis, pool, room, owner="test", ttl=10.0)
    assert ownership is not None
    judge: SharedState = await asyncio.to_thread(
        open_postgres,
        dsn,
        room,
        before_commit=PositionHook(room, ownership.fence.value),
        compact_document=False,
    )
    return ownership, judge


async def published_after_claim(redis: Redis, room: str) -> list[Entry]:
    """``room``'s ``out`` entries after its owner's first one, which must be an empty claim.

    An owner publishes an entry as it starts (what its judge holds beyond its replica:
    nothing, for a test's fresh room), so every hub learns of the new owner.
    """
    entries = await read_all(redis, room_key(room, "out"))
    assert entries, "the owner published nothing, not even its claim"
    claim = decode_out(entries[0][1])
    assert (claim.update, claim.answers) == (b"", ())
    return entries[1:]
