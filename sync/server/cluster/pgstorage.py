"""Cluster rooms in PostgreSQL: :class:`~crdt_state.postgres.PostgresStore`, one key per room.

- The **judge** (owner only) is ``open_postgres(dsn, room, before_commit=hook)``: every
  write transaction of its store ends with :func:`fenced_position`, one statement that
  locks the room's ``crdt_rooms`` row, checks the owner's fencing number (raising
  :class:`~sync.server.cluster.errors.Fenced`, which rolls the transaction back and fails
  the store) and records the ``in`` position whose judgement is committed. The judge is
  opened *after* the fence was claimed, so it sees every write of earlier owners.
- A **replica** is built from :func:`~crdt_state.postgres.load_stored` (a read-only load,
  no lock): a follower state with the snapshot and the log applied.

The stored position lags one batch behind (the hook writes the position of the last batch
that was already durable when the transaction began): resuming from it re-judges at
most one batch, which changes nothing (updates are idempotent, merges have their
request identity).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import psycopg

from crdt_state import SharedState
from crdt_state.postgres import load_stored, open_postgres
from sync.server.cluster.errors import ClusterUnavailable, Fenced
from sync.server.cluster.ownership import Ownership

if TYPE_CHECKING:
    from sync.server.cluster.node import ClusterNode

__all__ = ["PositionHook", "PostgresRoomStorage", "fenced_position"]

_FENCED_POSITION: Final = """
UPDATE crdt_rooms SET stream_position = coalesce(%s, stream_position)
WHERE room = %s AND fence = %s
RETURNING fence
"""


def fenced_position(
    conn: psycopg.Connection[Any], room: str, fence: int, position: str | None
) -> None:
    """Inside a write transaction: check ``fence`` (locking the room's row until commit)
    and record ``position`` (``None`` keeps the stored one).

    Raises:
        Fenced: ``fence`` is no longer the room's (another hub claimed it).
    """
    row = conn.execute(_FENCED_POSITION, (position, room, fence)).fetchone()
    if row is None:
        current = conn.execute("SELECT fence FROM crdt_rooms WHERE room = %s", (room,)).fetchone()
        raise Fenced(room, fence, int(current[0]) if current is not None else None)


class PositionHook:
    """The judge store's ``before_commit``: fence check plus the committed position.

    The owner calls :meth:`committed` with the last ``in`` id of each batch once that
    batch is durable; the next transaction records it.
    """

    def __init__(self, room: str, fence: int) -> None:
        self.room = room
        self.fence = fence
        self.position: str | None = None

    def committed(self, position: str) -> None:
        self.position = position

    def __call__(self, conn: psycopg.Connection[Any], last_ticket: int) -> None:
        fenced_position(conn, self.room, self.fence, self.position)


class PostgresRoomStorage:
    """Room states in the cluster's PostgreSQL database (see the module doc)."""

    durable = True

    def __init__(self, node: ClusterNode) -> None:
        assert node.postgres_dsn is not None
        self.dsn = node.postgres_dsn
        self.node = node
        self._hooks: dict[int, PositionHook] = {}

    async def open_replica(self, room: str) -> SharedState:
        stored = await asyncio.to_thread(load_stored, self.dsn, room)
        replica = SharedState(follower=True)
        if stored is not None:
            if stored.snapshot:
                replica.apply_update(stored.snapshot, agent="cluster")
            for change in stored.changes:
                replica.apply_update(change.update, agent=change.agent)
        return replica

    async def open_judge(
        self, room: str, ownership: Ownership, resolvers: Mapping[Any, object]
    ) -> SharedState:
        hook = PositionHook(room, ownership.fence.value)
        state = await asyncio.to_thread(
            open_postgres,
            self.dsn,
            room,
            before_commit=hook,
            compact_document=False,  # clients keep replicas: the document keeps its identity
            resolvers=resolvers,
        )
        self._hooks[id(state)] = hook
        return state

    def committed(self, judge: SharedState, position: str) -> None:
        """A batch ending at ``position`` is durable in ``judge``'s store."""
        hook = self._hooks.get(id(judge))
        if hook is not None:
            hook.committed(position)

    def forget(self, judge: SharedState) -> None:
        """``judge`` is closed."""
        self._hooks.pop(id(judge), None)

    async def stored_position(self, room: str) -> str | None:
        """The ``in`` position committed with the room's state (``None``: none yet)."""
        try:
            async with self.node.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT stream_position FROM crdt_rooms WHERE room = %s", (room,)
                )
                row = await cur.fetchone()
        except psycopg.OperationalError as exc:
            raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
        return None if row is None or row[0] is None else str(row[0])
