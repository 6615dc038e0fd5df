"""The owner judges a batch at once and waits for PostgreSQL once: nothing answered before.

Real Redis and PostgreSQL. A second PostgreSQL session holds the room's ``crdt_rooms``
row locked, so the judge's fenced commit waits: the owner must publish nothing (no
update, no answer) until that commit happened; then one ``out`` entry carries every
answer of the batch, and the merges are in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any, cast

import psycopg
from owned import owned_judge, published_after_claim
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from crdt_state.postgres import load_stored
from sync import ChangeKind, WireChange
from sync.server.cluster import room_key
from sync.server.cluster.owner import RoomOwner
from sync.server.cluster.streams import MERGE, AnswerKind, InEntry, decode_out, encode_in
from sync.wire import protocol as p


def _merge(request_id: int, key: str) -> bytes:
    change = WireChange(ChangeKind.SET, (key,), request_id)
    return p.encode_merge_request(request_id, "agent", b"\x00", [change], writer="w")


async def test_a_batch_is_answered_only_once_postgres_committed_it(
    redis: Redis, pool: AsyncConnectionPool[AsyncConnection[Any]], postgres_dsn: str
) -> None:
    room = f"batch-{secrets.token_hex(4)}"
    ownership, judge = await owned_judge(redis, pool, postgres_dsn, room)
    for n in range(3):
        entry = InEntry(MERGE, _merge(n + 1, f"k{n}"), "hub-a", 7, "agent", "scope")
        # redis types the fields as a dict, invariant: a dict[str, ...] is one only by a cast
        await redis.xadd(room_key(room, "in"), cast(dict[FieldT, EncodableT], encode_in(entry)))
    blocker = await psycopg.AsyncConnection.connect(postgres_dsn)
    owner = RoomOwner(redis, ownership, judge, start="0-0", max_document=1 << 20)
    task: asyncio.Task[None] | None = None
    try:
        async with blocker.transaction():
            await blocker.execute("SELECT 1 FROM crdt_rooms WHERE room = %s FOR UPDATE", (room,))
            task = asyncio.create_task(owner.run())
            await asyncio.sleep(1.0)  # judged in memory by now; the commit waits for the row
            assert judge.get("k2") == 3
            assert await published_after_claim(redis, room) == []  # nothing answered
            assert owner.judged == 0
        # the lock is gone: the batch commits, then is published as one entry
        for _ in range(100):
            published = await published_after_claim(redis, room)
            if published:
                break
            await asyncio.sleep(0.05)
        assert len(published) == 1
        out = decode_out(published[0][1])
        assert [a.kind for a in out.answers] == [AnswerKind.REPLY] * 3
        assert [p.reply_head(a.payload) for a in out.answers] == [
            (n, p.MergeStatus.OK) for n in (1, 2, 3)
        ]
        stored = await asyncio.to_thread(load_stored, postgres_dsn, room)
        assert stored is not None
        assert sorted(r.key.request_id for r in stored.requests) == [1, 2, 3]
        assert {path for c in stored.changes for path in c.paths} >= {("k0",), ("k1",), ("k2",)}
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await blocker.close()
        await asyncio.to_thread(judge.close)
        await ownership.release()
