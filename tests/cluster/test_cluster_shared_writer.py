"""One hub, one PostgreSQL writer: the batches of several rooms in one fenced transaction.

Real PostgreSQL. Three judges share a :class:`~crdt_state.postgres.SharedWriter`; the
writer is held busy while each of them hands it a batch, so the three batches go in one
transaction. Another hub has meanwhile claimed one of the rooms: that room's batch is
refused by its fence (nothing of it written, its store failed), and the other two
commit in the same transaction, their position and the writer's session recorded. Then a
fenced room and a room whose batch the server refuses (a duplicate log row) in one round:
the round runs again, each batch on its own, and only those two fail (a fence moved between
the two tries refuses its batch on the retry). Every way of running the hooks: folded
into the round's one statement (the hub's writer), the cluster's one statement for all
rooms, and one savepoint per hook.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool
from writer_rounds import durability_told, held_writer, until

from crdt_state import SharedState, StorageError
from crdt_state.postgres import CheckHooks, SharedWriter, load_stored, open_postgres
from sync.server.cluster import Fenced, claim_fence
from sync.server.cluster.pgsessions import depose
from sync.server.cluster.pgstorage import FencedPositions, PositionHook, fenced_positions

Pool = AsyncConnectionPool[AsyncConnection[Any]]


GATE = 0x7E57_0001
"""The advisory lock the test holds to keep the writer busy in a round."""


@pytest.mark.parametrize(
    "check", [FencedPositions(), fenced_positions, None], ids=["folded", "one-check", "savepoints"]
)
async def test_a_fenced_room_fails_alone_in_a_shared_transaction(
    pool: Pool, postgres_dsn: str, check: CheckHooks | None
) -> None:
    prefix = f"shared-{secrets.token_hex(4)}"
    rooms = [f"{prefix}-{n}" for n in range(3)]
    async with pool.connection() as conn:
        fences = [await claim_fence(conn, room, "hub-a#1") for room in rooms]
    writer = await asyncio.to_thread(SharedWriter, postgres_dsn, check=check)
    judges: list[SharedState] = []
    try:
        judges += await _open_judges(writer, postgres_dsn, rooms, fences, committed="7")
        async with pool.connection() as conn:  # another hub takes the middle room
            taken = await claim_fence(conn, rooms[1], "hub-b#2")
        rounds, parts = writer.rounds, writer.parts
        await asyncio.to_thread(_commit_in_one_round, writer, judges, postgres_dsn)
        outcomes = [await asyncio.to_thread(durability_told, judge) for judge in judges]
        assert (writer.rounds, writer.parts) == (rounds + 2, parts + 4)  # busy, then all three
        assert outcomes[0] == [None] and outcomes[2] == [None]
        refused = outcomes[1][0]
        assert isinstance(refused, StorageError)
        assert isinstance(refused.__cause__, Fenced)
        assert (refused.__cause__.fence, refused.__cause__.current) == (1, taken.value)
        for n in (0, 2):
            stored = await asyncio.to_thread(load_stored, postgres_dsn, rooms[n])
            assert stored is not None and len(stored.changes) == 1
        stored = await asyncio.to_thread(load_stored, postgres_dsn, rooms[1])
        assert stored is not None and stored.changes == []  # only the creation, before
        with pytest.raises(StorageError):  # the deposed room's store refuses every later write
            judges[1].commit({"n": 9}, judges[1].token, "agent")
        judges[0].commit({"m": 1}, judges[0].token, "agent")  # the others go on
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT room, stream_position, judge_pid FROM crdt_rooms"
                " WHERE room = ANY(%s) ORDER BY room",
                (rooms,),
            )
            rows = await cur.fetchall()
        assert rows[0] == (rooms[0], "1-7", writer.pid)
        assert rows[2] == (rooms[2], "1-7", writer.pid)
        assert rows[1][1] is None  # the refused position was never recorded
    finally:
        for judge in judges:
            await asyncio.to_thread(judge.close)
        await asyncio.to_thread(writer.close)


async def test_a_new_owner_ends_a_writer_left_idle_in_a_transaction(
    pool: Pool, postgres_dsn: str
) -> None:
    """The recorded session is ended only when it sits inside a transaction, and not ours."""
    room = f"shared-depose-{secrets.token_hex(4)}"
    async with pool.connection() as conn:
        fence = await claim_fence(conn, room, "hub-a#1")
    paused: psycopg.Connection[TupleRow] = await asyncio.to_thread(
        psycopg.connect, postgres_dsn, autocommit=True
    )
    try:
        paused.execute(
            "UPDATE crdt_rooms SET judge_pid = pg_backend_pid() WHERE room = %s", (room,)
        )
        async with pool.connection() as conn:
            new = await claim_fence(conn, room, "hub-b#2")
            assert await depose(conn, room, new.value, idle=0.0) == 0  # idle, no transaction
            paused.execute("BEGIN")
            paused.execute("SELECT 1 FROM crdt_rooms WHERE room = %s", (room,))
            time.sleep(0.2)
            assert await depose(conn, room, new.value, mine=[paused.info.backend_pid]) == 0
            assert await depose(conn, room, new.value, idle=5.0) == 0  # not long enough
            assert await depose(conn, room, new.value, idle=0.1) == 1
        with pytest.raises(psycopg.OperationalError):
            paused.execute("SELECT 1")
        assert fence.value < new.value
    finally:
        paused.close()


async def test_the_writer_connects_again_after_its_session_was_ended(
    pool: Pool, postgres_dsn: str
) -> None:
    """A deposed writer fails the round under way (its stores fail), then serves again."""
    prefix = f"shared-again-{secrets.token_hex(4)}"
    async with pool.connection() as conn:
        fences = [await claim_fence(conn, f"{prefix}-{n}", "hub-a#1") for n in range(2)]
    writer = await asyncio.to_thread(SharedWriter, postgres_dsn, check=fenced_positions)
    judges: list[SharedState] = []
    try:
        first: SharedState = await asyncio.to_thread(
            open_postgres,
            postgres_dsn,
            fences[0].room,
            before_commit=PositionHook(fences[0].room, fences[0].value),
            writer=writer,
        )
        judges.append(first)
        first.commit({"a": 1}, first.token, "agent")
        ended = writer.pid
        async with pool.connection() as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (ended,))
        with pytest.raises(StorageError):  # the round on the ended session fails
            first.commit({"a": 2}, first.token, "agent")
        second: SharedState = await asyncio.to_thread(
            open_postgres,
            postgres_dsn,
            fences[1].room,
            before_commit=PositionHook(fences[1].room, fences[1].value),
            writer=writer,
        )
        judges.append(second)
        second.commit({"b": 1}, second.token, "agent")  # a new session
        assert writer.pid is not None and writer.pid != ended
        stored = await asyncio.to_thread(load_stored, postgres_dsn, fences[1].room)
        assert stored is not None and len(stored.changes) == 1
        stored = await asyncio.to_thread(load_stored, postgres_dsn, fences[0].room)
        assert stored is not None and len(stored.changes) == 1  # {"a": 2} was never stored
    finally:
        for judge in judges:
            await asyncio.to_thread(judge.close)
        await asyncio.to_thread(writer.close)


@pytest.mark.parametrize(
    "check", [FencedPositions(), fenced_positions, None], ids=["folded", "one-check", "savepoints"]
)
async def test_a_fenced_room_and_a_refused_batch_fail_alone_in_one_round(
    pool: Pool, postgres_dsn: str, check: CheckHooks | None
) -> None:
    """Room 0 stores, room 1 is fenced (another hub claimed it), room 2's batch is refused
    by the server (its next log row was written by someone else): the round runs again,
    each batch on its own, the fence checked again; only rooms 1 and 2 fail."""
    prefix = f"isolate-{secrets.token_hex(4)}"
    rooms = [f"{prefix}-{n}" for n in range(3)]
    async with pool.connection() as conn:
        fences = [await claim_fence(conn, room, "hub-a#1") for room in rooms]
    writer = await asyncio.to_thread(SharedWriter, postgres_dsn, check=check)
    judges: list[SharedState] = []
    try:
        judges += await _open_judges(writer, postgres_dsn, rooms, fences, committed="7")
        async with pool.connection() as conn:
            taken = await claim_fence(conn, rooms[1], "hub-b#2")
            await _intrude(conn, rooms[2])
        rounds = writer.rounds
        await asyncio.to_thread(_commit_in_one_round, writer, judges, postgres_dsn)
        outcomes = [await asyncio.to_thread(durability_told, judge) for judge in judges]
        assert writer.rounds == rounds + 2 and writer.retries == 1
        assert outcomes[0] == [None]
        fenced, rejected = outcomes[1][0], outcomes[2][0]
        assert isinstance(fenced, StorageError) and isinstance(fenced.__cause__, Fenced)
        assert fenced.details["reason"] == "refused"
        assert (fenced.__cause__.fence, fenced.__cause__.current) == (1, taken.value)
        assert isinstance(rejected, StorageError) and rejected.details["reason"] == "rejected"
        assert rejected.details["key"] == rooms[2]
        assert isinstance(rejected.__cause__, psycopg.errors.UniqueViolation)
        stored = await asyncio.to_thread(load_stored, postgres_dsn, rooms[0])
        assert stored is not None and len(stored.changes) == 1
        stored = await asyncio.to_thread(load_stored, postgres_dsn, rooms[1])
        assert stored is not None and stored.changes == []
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT room, stream_position, judge_pid FROM crdt_rooms"
                " WHERE room = ANY(%s) ORDER BY room",
                (rooms,),
            )
            rows = await cur.fetchall()
            cur = await conn.execute(
                "SELECT agent FROM crdt_store_log WHERE key = %s ORDER BY seq", (rooms[2],)
            )
            assert await cur.fetchall() == [("intruder",)]  # nothing of the refused batch
        assert rows[0] == (rooms[0], "1-7", writer.pid)
        assert rows[1][1] is None  # the fenced room's position was never recorded
        # The refused batch's fence held: its committed position (the last durable batch's,
        # true whatever became of this one) went in with the others.
        assert rows[2] == (rooms[2], "1-7", writer.pid)
        for n in (1, 2):  # both failed stores refuse every later write
            with pytest.raises(StorageError):
                judges[n].commit({"n": 9}, judges[n].token, "agent")
        judges[0].commit({"m": 1}, judges[0].token, "agent")
    finally:
        for judge in judges:
            await asyncio.to_thread(judge.close)
        await asyncio.to_thread(writer.close)


async def test_a_fence_moved_before_the_retry_refuses_its_batch(
    pool: Pool, postgres_dsn: str
) -> None:
    """The retry checks every fence again: a room claimed by another hub between the two
    tries (its row unlocked by the first try's rollback) is refused, not stored."""
    prefix = f"recheck-{secrets.token_hex(4)}"
    rooms = [f"{prefix}-{n}" for n in range(3)]
    async with pool.connection() as conn:
        fences = [await claim_fence(conn, room, "hub-a#1") for room in rooms]
    calls: list[int] = []

    def check(conn: psycopg.Connection[Any], hooks: Any) -> Any:
        hooked = {h.room for h, _ in hooks if isinstance(h, PositionHook)}
        if rooms[2] in hooked:
            calls.append(len(hooks))
            if len(calls) == 2:  # the retry: another hub claims room 2 first
                with psycopg.connect(postgres_dsn, autocommit=True) as other:
                    other.execute(
                        "UPDATE crdt_rooms SET fence = fence + 1, owner = 'hub-b#2'"
                        " WHERE room = %s",
                        (rooms[2],),
                    )
        return fenced_positions(conn, hooks)

    writer = await asyncio.to_thread(SharedWriter, postgres_dsn, check=check)
    judges: list[SharedState] = []
    try:
        judges += await _open_judges(writer, postgres_dsn, rooms, fences)
        async with pool.connection() as conn:
            await _intrude(conn, rooms[1])
        await asyncio.to_thread(_commit_in_one_round, writer, judges, postgres_dsn)
        outcomes = [await asyncio.to_thread(durability_told, judge) for judge in judges]
        assert calls == [3, 3] and writer.retries == 1  # both tries checked all three
        assert outcomes[0] == [None]
        rejected, fenced = outcomes[1][0], outcomes[2][0]
        assert isinstance(rejected, StorageError) and rejected.details["reason"] == "rejected"
        assert isinstance(fenced, StorageError) and isinstance(fenced.__cause__, Fenced)
        assert (fenced.__cause__.fence, fenced.__cause__.current) == (1, 2)
        for n, count in ((0, 1), (2, 0)):
            stored = await asyncio.to_thread(load_stored, postgres_dsn, rooms[n])
            assert stored is not None and len(stored.changes) == count
    finally:
        for judge in judges:
            await asyncio.to_thread(judge.close)
        await asyncio.to_thread(writer.close)


async def _open_judges(
    writer: SharedWriter,
    dsn: str,
    rooms: list[str],
    fences: list[Any],
    committed: str | None = None,
) -> list[SharedState]:
    """A judge of each room on ``writer``, fenced by its claim; ``committed``: the position
    each records with its next write (as ``<fence>-<committed>``)."""
    judges: list[SharedState] = []
    for room, fence in zip(rooms, fences, strict=True):
        hook = PositionHook(room, fence.value)
        judges.append(
            await asyncio.to_thread(open_postgres, dsn, room, before_commit=hook, writer=writer)
        )
        if committed is not None:
            hook.committed(f"{fence.value}-{committed}")
    return judges


async def _intrude(conn: Any, room: str) -> None:
    """Write ``room``'s next log row from outside: its store's next batch is refused."""
    await conn.execute(
        "INSERT INTO crdt_store_log (key, seq, token, doc_update, agent, origin,"
        " time, paths) VALUES (%s, 1, '', '', 'intruder', 'test', 0, '[]')",
        (room,),
    )


def _commit_in_one_round(writer: SharedWriter, judges: list[SharedState], dsn: str) -> None:
    """One merge in each judge, all handed in while the writer is held: one round for all."""
    with held_writer(writer, dsn, GATE):
        for n, judge in enumerate(judges):
            judge.commit({"n": n}, judge.token, "agent", wait=False)
        until(lambda: writer.waiting >= len(judges), "the batches were not handed in")
