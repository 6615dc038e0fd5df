"""Fencing numbers in PostgreSQL: a deposed room owner can never commit.

Each room has a row in ``crdt_rooms`` whose ``fence`` grows by one on every claim. A hub
that has just acquired a room's Redis lease calls :func:`claim_fence` (one transaction:
bump and record the claimant) and from then on does every write of the room inside a
transaction that first calls :func:`check_fence`, which locks the room's row until that
transaction ends and raises :class:`~sync.server.cluster.errors.Fenced` unless the fence is still
the one claimed.

Why this is enough: a claim updates the same row, so it waits for any transaction that
passed the check to finish, and every check that starts after a claim committed sees the
new fence. So the writes of fence ``f`` all commit before the claim of ``f + 1``, and none
after it, however long the old owner was paused. (The new owner must load the room's state
*after* its claim committed, so that it sees every write of its predecessors.)

A storage backend calls :func:`check_fence` inside its own commit transaction, on its own
connection; :func:`fenced_transaction` is the same as a context manager.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus

from .errors import ClusterUnavailable, Fenced

__all__ = ["Fence", "check_fence", "claim_fence", "current_fence", "fenced_transaction"]

_CLAIM: Final = """
INSERT INTO crdt_rooms AS r (room, fence, owner) VALUES (%s, 1, %s)
ON CONFLICT (room) DO UPDATE
    SET fence = r.fence + 1, owner = EXCLUDED.owner, claimed_at = now()
RETURNING fence
"""

_CHECK: Final = "SELECT fence FROM crdt_rooms WHERE room = %s FOR UPDATE"


@dataclass(frozen=True)
class Fence:
    """What a claim returned: the ``room``, its fencing number ``value``, the ``owner`` token."""

    room: str
    value: int
    owner: str


async def claim_fence(conn: psycopg.AsyncConnection[Any], room: str, owner: str) -> Fence:
    """Bump ``room``'s fence (creating its row at 1) and record ``owner``; committed on return.

    Call it only while holding the room's lease, and outside any transaction on ``conn``
    (``ValueError`` otherwise: a claim inside a caller's transaction would not be final).
    Every earlier fence of the room is stale from the moment this returns.
    """
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise ValueError("claim_fence() needs a connection outside any transaction")
    try:
        if conn.autocommit:  # one statement is its own transaction: one round trip
            cur = await conn.execute(_CLAIM, (room, owner))
            row = await cur.fetchone()
        else:
            async with conn.transaction():
                cur = await conn.execute(_CLAIM, (room, owner))
                row = await cur.fetchone()
    except psycopg.OperationalError as exc:
        raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
    assert row is not None  # INSERT ... RETURNING always returns the row
    return Fence(room, int(row[0]), owner)


async def check_fence(conn: psycopg.AsyncConnection[Any], fence: Fence) -> None:
    """Inside the caller's open transaction: lock the room's row, raise ``Fenced`` if stale.

    The row stays locked until the caller's transaction ends, so no claim can slip between
    this check and the caller's commit. Raises ``ValueError`` when ``conn`` is in autocommit
    mode outside a transaction block (the lock would end with this statement).
    """
    status = conn.info.transaction_status
    if status == TransactionStatus.IDLE and conn.autocommit:
        raise ValueError("check_fence() must run inside the transaction it guards")
    try:
        cur = await conn.execute(_CHECK, (fence.room,))
        row = await cur.fetchone()
    except psycopg.OperationalError as exc:
        raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
    current = int(row[0]) if row is not None else None
    if current != fence.value:
        raise Fenced(fence.room, fence.value, current)


@asynccontextmanager
async def fenced_transaction(
    conn: psycopg.AsyncConnection[Any], fence: Fence
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A transaction on ``conn`` that commits only under ``fence``.

    ``async with fenced_transaction(conn, fence) as conn: ...`` checks the fence first
    (raising ``Fenced`` before the body runs when it is stale), runs the body, commits at
    the end, and rolls back if anything raises.
    """
    async with conn.transaction():
        await check_fence(conn, fence)
        yield conn


async def current_fence(conn: psycopg.AsyncConnection[Any], room: str) -> int | None:
    """The room's fence now (no lock), ``None`` if it was never claimed."""
    try:
        cur = await conn.execute("SELECT fence FROM crdt_rooms WHERE room = %s", (room,))
        row = await cur.fetchone()
    except psycopg.OperationalError as exc:
        raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
    return int(row[0]) if row is not None else None
