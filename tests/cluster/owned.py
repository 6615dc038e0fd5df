"""A room this test owns: its lease and fence taken, its judge open on PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from crdt_state import SharedState
from crdt_state.postgres import open_postgres
from sync.server.cluster.ownership import Ownership, try_acquire
from sync.server.cluster.pgstorage import PositionHook


async def owned_judge(
    redis: Redis, pool: AsyncConnectionPool[AsyncConnection[Any]], dsn: str, room: str
) -> tuple[Ownership, SharedState]:
    """Take ``room`` (owner ``test``, a 10 s lease) and open its judge fenced by the claim."""
    ownership = await try_acquire(redis, pool, room, owner="test", ttl=10.0)
    assert ownership is not None
    judge = await asyncio.to_thread(
        open_postgres,
        dsn,
        room,
        before_commit=PositionHook(room, ownership.fence.value),
        compact_document=False,
    )
    return ownership, judge
