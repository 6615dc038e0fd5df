"""``commit(wait=False)`` and ``apply_update(wait=False)``: made at once, durable later.

A PostgreSQL store whose ``before_commit`` hook waits for the test holds every write
transaction open: the calls must return while it is held (the change made in memory, not
yet durable), ``when_durable`` must not report it durable before the hook let the
transaction commit, and afterwards the changes are in the database.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from crdt_state import SharedState
from crdt_state.postgres import load_stored, open_postgres


def test_unwaited_writes_return_at_once_and_are_durable_only_after_the_commit(
    throwaway_postgres: str,
) -> None:
    key = f"unwaited-{secrets.token_hex(4)}"
    gate = threading.Event()
    gate.set()  # creating the state commits once

    def hook(conn: Any, ticket: int) -> None:
        assert gate.wait(10)

    state = open_postgres(throwaway_postgres, key, before_commit=hook)
    source = SharedState()
    source.commit({"remote": 1}, source.token, "peer")
    try:
        state.commit({"warm": 0}, state.token, "a")  # waits: the gate is open
        gate.clear()
        result = state.commit({"a": 1}, state.token, "a", request_id=1, wait=False)
        applied = state.apply_update(source.get_update(), agent="peer", wait=False)
        assert result.applied == (("a",),)
        assert applied.applied == (("remote",),)
        assert state.get("a") == 1 and state.get("remote") == 1  # made in memory at once
        told: list[BaseException | None] = []
        done = threading.Event()

        def durable(error: BaseException | None) -> None:
            told.append(error)
            done.set()

        state.when_durable(durable)
        assert not done.wait(0.3)  # the transaction is held: not durable yet
        gate.set()
        assert done.wait(10)
        assert told == [None]
        stored = load_stored(throwaway_postgres, key)
        assert stored is not None
        assert {p for c in stored.changes for p in c.paths} >= {("a",), ("remote",)}
        assert [r.key.request_id for r in stored.requests] == [1]
    finally:
        gate.set()
        state.close()


async def test_awhen_durable_returns_only_after_the_commit(throwaway_postgres: str) -> None:
    """The awaitable form: pending while the transaction is held, done once it commits."""
    import asyncio

    key = f"awaited-{secrets.token_hex(4)}"
    gate = threading.Event()
    gate.set()

    def hook(conn: Any, ticket: int) -> None:
        assert gate.wait(10)

    state = open_postgres(throwaway_postgres, key, before_commit=hook)
    try:
        await state.awhen_durable()  # nothing pending: returns at once
        gate.clear()
        state.commit({"a": 1}, state.token, "a", wait=False)
        waiting = asyncio.ensure_future(state.awhen_durable())
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the transaction is held
        gate.set()
        await asyncio.wait_for(waiting, 10)
        stored = load_stored(throwaway_postgres, key)
        assert stored is not None and ("a",) in {p for c in stored.changes for p in c.paths}
    finally:
        gate.set()
        state.close()
