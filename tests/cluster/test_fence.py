"""Fencing numbers in PostgreSQL: every claim bumps, only the current fence commits."""

from __future__ import annotations

import asyncio
import pickle
import secrets
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from sync.server.cluster import (
    ClusterError,
    Fence,
    Fenced,
    check_fence,
    claim_fence,
    current_fence,
    fenced_transaction,
)

Pool = AsyncConnectionPool[AsyncConnection[Any]]


def new_room() -> str:
    return f"room-{secrets.token_hex(4)}"


async def make_table(conn: AsyncConnection[Any]) -> None:
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS fenced_writes "
        "(id bigserial PRIMARY KEY, room text NOT NULL, fence bigint NOT NULL, n int NOT NULL)"
    )


async def write(conn: AsyncConnection[Any], fence: Fence, n: int) -> None:
    async with fenced_transaction(conn, fence):
        await conn.execute(
            "INSERT INTO fenced_writes (room, fence, n) VALUES (%s, %s, %s)",
            (fence.room, fence.value, n),
        )


async def written(conn: AsyncConnection[Any], room: str) -> list[tuple[int, int]]:
    cur = await conn.execute(
        "SELECT fence, n FROM fenced_writes WHERE room = %s ORDER BY id", (room,)
    )
    return [(int(f), int(n)) for f, n in await cur.fetchall()]


async def test_claims_count_up_from_one_and_record_the_owner(pool: Pool) -> None:
    room = new_room()
    async with pool.connection() as conn:
        assert await current_fence(conn, room) is None
        first = await claim_fence(conn, room, "hub-a#1")
        second = await claim_fence(conn, room, "hub-b#2")
        assert (first.value, second.value) == (1, 2)
        assert await current_fence(conn, room) == 2
        cur = await conn.execute("SELECT owner FROM crdt_rooms WHERE room = %s", (room,))
        assert await cur.fetchone() == ("hub-b#2",)


async def test_a_stale_fence_writes_nothing_and_says_fenced(pool: Pool) -> None:
    room = new_room()
    async with pool.connection() as conn:
        await make_table(conn)
        old = await claim_fence(conn, room, "a")
        await write(conn, old, 1)
        new = await claim_fence(conn, room, "b")
        with pytest.raises(Fenced) as caught:
            await write(conn, old, 2)
        await write(conn, new, 3)
        assert await written(conn, room) == [(old.value, 1), (new.value, 3)]
    error = caught.value
    assert isinstance(error, ClusterError)
    assert error.code == "fenced"
    assert error.details == {"room": room, "fence": old.value, "current": new.value}
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.details) == (Fenced, error.details)


async def test_an_unclaimed_room_is_fenced(pool: Pool) -> None:
    room = new_room()
    async with pool.connection() as conn:
        with pytest.raises(Fenced) as caught:
            async with fenced_transaction(conn, Fence(room, 1, "nobody")):
                pass
    assert caught.value.current is None


async def test_the_check_must_run_inside_the_transaction_it_guards(pool: Pool) -> None:
    room = new_room()
    async with pool.connection() as conn:  # autocommit connections
        fence = await claim_fence(conn, room, "a")
        with pytest.raises(ValueError):
            await check_fence(conn, fence)
        async with conn.transaction():
            await check_fence(conn, fence)  # fine inside a transaction block
            with pytest.raises(ValueError):
                await claim_fence(conn, room, "b")  # a claim must not nest


async def test_a_claim_waits_for_the_fenced_transaction_in_flight(pool: Pool) -> None:
    """The old owner's commit lands before the new claim; nothing of it after."""
    room = new_room()
    async with pool.connection() as old_conn, pool.connection() as new_conn:
        await make_table(old_conn)
        old = await claim_fence(old_conn, room, "old")
        async with fenced_transaction(old_conn, old):
            await old_conn.execute(
                "INSERT INTO fenced_writes (room, fence, n) VALUES (%s, %s, 1)",
                (room, old.value),
            )
            claim = asyncio.create_task(claim_fence(new_conn, room, "new"))
            await asyncio.sleep(0.3)
            assert not claim.done(), "the claim must wait for the row lock"
        new = await asyncio.wait_for(claim, 5)
        assert new.value == old.value + 1
        with pytest.raises(Fenced):
            await write(old_conn, old, 2)
        assert await written(old_conn, room) == [(old.value, 1)]


class FencingMachine(RuleBasedStateMachine):
    """Claims and writes on two rooms against real PostgreSQL, checked against the rule.

    The model: a room's fence is the number of claims so far; a write under fence ``f``
    commits iff ``f`` is the room's fence at that moment; a refused write leaves nothing.
    """

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.conn: AsyncConnection[Any] = self.loop.run_until_complete(
            AsyncConnection.connect(dsn, autocommit=True)
        )
        self.rooms = [new_room(), new_room()]
        self.fences: dict[str, int] = dict.fromkeys(self.rooms, 0)
        self.handed: list[Fence] = []
        self.expected: dict[str, list[tuple[int, int]]] = {room: [] for room in self.rooms}
        self.n = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    @initialize()
    def table(self) -> None:
        self.run(make_table(self.conn))

    @rule(room=st.integers(0, 1), owner=st.sampled_from(["a", "b", "c"]))
    def claim(self, room: int, owner: str) -> None:
        name = self.rooms[room]
        fence = self.run(claim_fence(self.conn, name, owner))
        self.fences[name] += 1
        assert fence.value == self.fences[name]
        self.handed.append(fence)

    @rule(data=st.data())
    def write(self, data: st.DataObject) -> None:
        if not self.handed:
            return
        fence = data.draw(st.sampled_from(self.handed))
        self.n += 1
        current = self.fences[fence.room]
        try:
            self.run(write(self.conn, fence, self.n))
        except Fenced as exc:
            assert fence.value != current
            assert exc.current == current
        else:
            assert fence.value == current
            self.expected[fence.room].append((fence.value, self.n))

    @invariant()
    def agrees_with_the_model(self) -> None:
        for room in self.rooms:
            assert self.run(current_fence(self.conn, room)) == (self.fences[room] or None)
            assert self.run(written(self.conn, room)) == self.expected[room]

    def teardown(self) -> None:
        self.run(self.conn.close())
        self.loop.close()


def test_fencing_rule_holds_for_any_sequence_of_claims_and_writes(postgres_dsn: str) -> None:
    # hypothesis leaves run_state_machine_as_test unannotated
    run_state_machine_as_test(  # type: ignore[no-untyped-call]
        lambda: FencingMachine(postgres_dsn),
        settings=settings(max_examples=25, stateful_step_count=20, deadline=None),
    )
