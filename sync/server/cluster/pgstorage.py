"""Cluster rooms in PostgreSQL: :class:`~crdt_state.postgres.PostgresStore`, one key per room.

- The **judge** (owner only) is ``open_postgres(dsn, room, before_commit=hook,
  writer=shared)``: its batches are written by the hub's one
  :class:`~crdt_state.postgres.SharedWriter`, which stores the batches of every room the
  hub owns that are ready at that moment in one transaction. That transaction first runs
  :func:`fenced_positions`: one statement that locks every one of those rooms'
  ``crdt_rooms`` rows, checks each owner's fencing number and records the ``in``
  position whose judgement is committed and the writing session's ``pg_backend_pid()``
  (:func:`fenced_position` is the same for one room, the hook's own form). A room whose
  fence is stale writes nothing and its store fails with
  :class:`~sync.server.cluster.errors.Fenced` (its owner steps down); the others commit.
  Nothing is durable, so nothing is answered or published, before the one ``COMMIT``.
  The judge is opened *after* the fence was claimed, so it sees every write of earlier
  owners.
- Before opening its judge, a new owner ends the PostgreSQL sessions of earlier judges of
  the room (:func:`depose`): a paused one would hold row locks its new writes wait for.
  Those are the room's own connection (loading, queries, compaction: found by its
  ``application_name``) and the session recorded by the last fenced write (another
  hub's shared writer: ended only when it sits idle inside a transaction, since its other
  rooms share it). The sessions' names and :func:`depose` are in
  :mod:`~sync.server.cluster.pgsessions`.
- A contender that sees the holder miss a renewal may **preload** the judge
  (:meth:`PostgresRoomStorage.preload`): the same store opened ``read_only`` (no write
  can be queued), in its own session named ``crdt-preload:...``. After its claim the
  owner hands it to :meth:`PostgresRoomStorage.open_judge`, which in one round trip
  renames the session to the judge's, ends earlier judges' sessions (:func:`depose`) and
  reads the rows committed since the preload (one transaction, after the claim
  committed: the fence makes them final), then replays only those
  (:func:`~crdt_state.takeover.promote`); if that fails it opens the judge afresh.
- A **replica** is built from :func:`~crdt_state.postgres.load_stored` (a read-only load,
  no lock): a follower state with the snapshot and the log applied.

The stored position lags one batch behind (the hook writes the position of the last batch
that was already durable when the transaction began): resuming from it re-judges at
most one batch, which changes nothing (updates are idempotent, merges have their
request identity).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import psycopg

from crdt_state import SharedState
from crdt_state.errors import StorageError
from crdt_state.postgres import FoldedCheck, SharedWriter, load_stored, open_postgres
from crdt_state.postgres import WriterHook as Hook
from crdt_state.takeover import preload, promote
from sync.server.cluster.context import NodeContext
from sync.server.cluster.errors import ClusterUnavailable, Fenced
from sync.server.cluster.ownership import Ownership
from sync.server.cluster.pgsessions import depose, judge_dsn, take_over, writer_dsn

log = logging.getLogger("crdt_state.cluster")

__all__ = [
    "FencedPositions",
    "PositionHook",
    "PostgresRoomStorage",
    "fenced_position",
    "fenced_positions",
]

_FENCED_POSITION: Final = """
UPDATE crdt_rooms SET stream_position = coalesce(%s, stream_position),
    judge_pid = pg_backend_pid()
WHERE room = %s AND fence = %s
RETURNING fence
"""


def fenced_position(
    conn: psycopg.Connection[Any], room: str, fence: int, position: str | None
) -> None:
    """Check ``fence`` and record ``position``, inside a write transaction.

    The check locks the room's row until commit; a ``position`` of ``None`` keeps the
    stored one. The session's server process is recorded too (see :func:`depose`).

    Raises:
        Fenced: ``fence`` is no longer the room's (another hub claimed it).
    """
    row = conn.execute(_FENCED_POSITION, (position, room, fence)).fetchone()
    if row is None:
        current = conn.execute("SELECT fence FROM crdt_rooms WHERE room = %s", (room,)).fetchone()
        raise Fenced(room, fence, int(current[0]) if current is not None else None)


_FENCED_POSITIONS: Final = """
UPDATE crdt_rooms AS r SET stream_position = coalesce(v.position, r.stream_position),
    judge_pid = pg_backend_pid()
FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS v (room, fence, position)
WHERE r.room = v.room AND r.fence = v.fence
RETURNING r.room, r.fence
"""


_LOCKED_FENCES: Final = """
SELECT r.room FROM crdt_rooms AS r
JOIN unnest(%s::text[], %s::bigint[]) AS v (room, fence) ON r.room = v.room AND r.fence = v.fence
ORDER BY r.room FOR UPDATE OF r
"""
_POSITIONS_IF_OK: Final = """
UPDATE crdt_rooms AS r SET stream_position = coalesce(v.position, r.stream_position),
    judge_pid = pg_backend_pid()
FROM _ok, unnest(%s::text[], %s::text[]) AS v (room, position)
WHERE _ok.yes AND r.room = v.room
"""


def _position_hooks(hooks: Sequence[tuple[Hook, int]]) -> list[PositionHook] | None:
    """The hooks of ``hooks``, if every one is a :class:`PositionHook` (else ``None``)."""
    checks = [hook for hook, _ in hooks if isinstance(hook, PositionHook)]
    return checks if len(checks) == len(hooks) else None


class FencedPositions:
    """The shared writer's check of its rooms' fences: :func:`fenced_positions`, foldable.

    :meth:`fold` gives the same check as parts of the round's one statement
    (:mod:`crdt_state._pg_fold`): the rooms' rows locked in the order of their names where
    the fence holds, and their positions recorded only when every fence held.
    """

    def __call__(
        self, conn: psycopg.Connection[Any], hooks: Sequence[tuple[Hook, int]]
    ) -> list[BaseException | None]:
        """:func:`fenced_positions`."""
        return fenced_positions(conn, hooks)

    def fold(self, hooks: Sequence[tuple[Hook, int]]) -> FoldedCheck | None:
        """The check of ``hooks`` folded (``None`` unless all are :class:`PositionHook`)."""
        checks = _position_hooks(hooks)
        if checks is None:
            return None
        fences = sorted({(h.room, h.fence) for h in checks})
        positions = sorted({h.room: h.position for h in checks}.items())
        return FoldedCheck(
            _LOCKED_FENCES,
            ([room for room, _ in fences], [fence for _, fence in fences]),
            len(fences),
            _POSITIONS_IF_OK,
            ([room for room, _ in positions], [position for _, position in positions]),
        )


def fenced_positions(
    conn: psycopg.Connection[Any], hooks: Sequence[tuple[Hook, int]]
) -> list[BaseException | None]:
    """:func:`fenced_position` for many rooms' hooks in one statement (a shared writer's check).

    Every hook must be a :class:`PositionHook`. The rows are locked in the order of the
    room names (two hubs' writers lock them in the same order). Returns, per hook, ``None``
    when its fence holds (its row is now locked and its position recorded) or the
    :class:`~sync.server.cluster.errors.Fenced` it would have raised.
    """
    checks = _position_hooks(hooks)
    if checks is None:
        raise TypeError("fenced_positions() checks PositionHooks only")
    rooms = sorted({(h.room, h.fence, h.position) for h in checks})
    columns = tuple(list(column) for column in zip(*rooms, strict=True))
    passed = {(str(r), int(f)) for r, f in conn.execute(_FENCED_POSITIONS, columns).fetchall()}
    if all((h.room, h.fence) in passed for h in checks):
        return [None] * len(checks)
    stale = sorted({h.room for h in checks if (h.room, h.fence) not in passed})
    rows = conn.execute(
        "SELECT room, fence FROM crdt_rooms WHERE room = ANY(%s)", (stale,)
    ).fetchall()
    current = {str(room): int(fence) for room, fence in rows}
    return [
        None if (h.room, h.fence) in passed else Fenced(h.room, h.fence, current.get(h.room))
        for h in checks
    ]


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
        """Note that a batch ending at ``in`` id ``position`` is durable.

        The next transaction records it with the room's state.
        """
        self.position = position

    def __call__(self, conn: psycopg.Connection[Any], last_ticket: int) -> None:
        """Check the fence and record the committed position, before a commit.

        Raises:
            Fenced: another hub claimed the room; the transaction must not commit.
        """
        fenced_position(conn, self.room, self.fence, self.position)


class PostgresRoomStorage:
    """Room states in the cluster's PostgreSQL database (see the module doc)."""

    durable = True

    def __init__(self, node: NodeContext) -> None:
        assert node.postgres_dsn is not None
        self.dsn = node.postgres_dsn
        self.node = node
        self._hooks: dict[int, PositionHook] = {}
        self._writer: SharedWriter | None = None
        self._opening = asyncio.Lock()

    async def writer(self) -> SharedWriter:
        """The hub's shared writer: one session for the write transactions of all its rooms."""
        async with self._opening:
            if self._writer is None:
                dsn = writer_dsn(self.dsn, self.node.hub_id, self.node.lease_ttl)
                self._writer = await asyncio.to_thread(SharedWriter, dsn, check=FencedPositions())
            return self._writer

    async def close(self) -> None:
        """Close the shared writer (every judge is closed first)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            await asyncio.to_thread(writer.close)
            counts = (writer.parts, writer.rounds, writer.retries)
            log.info("shared writer: %d batches in %d rounds (%d run again)", *counts)

    async def open_replica(self, room: str) -> SharedState:
        """Load the room's stored snapshot and changes into a follower replica.

        Raises:
            ClusterUnavailable: PostgreSQL did not answer (transient: the connection that
                opens the room is closed with 1013 and its client comes back).
            StorageError: the stored room cannot be read (damaged, newer tables).
        """
        try:
            stored = await asyncio.to_thread(load_stored, self.dsn, room)
        except StorageError as exc:
            if exc.details.get("reason") != "unavailable":
                raise
            raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
        replica = SharedState(follower=True)
        if stored is not None:
            if stored.snapshot:
                replica.apply_update(stored.snapshot, agent="cluster")
            for change in stored.changes:
                replica.apply_update(change.update, agent=change.agent)
        return replica

    async def preload(self, room: str, resolvers: Mapping[Any, object]) -> SharedState:
        """The room's judge loaded ``read_only``, before this hub holds the room.

        It refuses every write (``ReadOnlyStore``) until :meth:`open_judge` promotes it
        after a claim; close it if it is not used.

        Raises:
            StorageError: PostgreSQL failed, or the room was never stored (nothing to load).
        """
        return await asyncio.to_thread(
            preload,
            judge_dsn(self.dsn, room, None, self.node.lease_ttl),
            room,
            compact_document=False,
            resolvers=resolvers,
        )

    async def open_judge(
        self,
        room: str,
        ownership: Ownership,
        resolvers: Mapping[Any, object],
        preloaded: SharedState | None = None,
    ) -> SharedState:
        """Open the room's PostgreSQL store as the judge under ``ownership``'s fence.

        The sessions of earlier judges of the room are ended first (when PostgreSQL
        allows it), and every commit of the returned state checks the fence. A
        ``preloaded`` judge (:meth:`preload`, loaded before the claim) is caught up with
        the rows committed since its load and returned; when that fails it is closed and
        the judge is opened afresh.

        Raises:
            Fenced: on a later commit, once another hub claimed the room.
        """
        fence = ownership.fence.value
        hook = PositionHook(room, fence)
        writer = await self.writer()
        mine = [pid] if (pid := writer.pid) is not None else []
        idle = self.node.lease_ttl / 15
        if preloaded is not None:
            try:
                # after the claim committed: every row of an earlier fence is final. Named
                # as the judge and earlier judges ended in the same round trip
                caught = await asyncio.to_thread(
                    promote,
                    preloaded,
                    hook,
                    setup=take_over(room, fence, mine, idle),
                    writer=writer,
                )
            except (StorageError, psycopg.Error) as exc:
                log.warning("room %r: preloaded judge not usable (%s), loading afresh", room, exc)
                await asyncio.to_thread(preloaded.close)
            else:
                log.info("room %r: preloaded judge caught up %d change(s)", room, caught)
                self._hooks[id(preloaded)] = hook
                return preloaded
        try:
            async with self.node.pool.connection() as conn:
                ended = await depose(conn, room, fence, mine=mine, idle=idle)
        except psycopg.Error as exc:  # not allowed, or unavailable: the fence still holds
            log.warning("room %r: cannot end earlier judges' sessions: %s", room, exc)
            ended = 0
        if ended:
            log.info("room %r: ended %d session(s) of earlier owners", room, ended)
        state: SharedState = await asyncio.to_thread(
            open_postgres,
            judge_dsn(self.dsn, room, fence, self.node.lease_ttl),
            room,
            before_commit=hook,
            writer=writer,
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

    async def has_room(self, room: str) -> bool:
        """True when the room has a row of its own (an owner claimed it once)."""
        try:
            async with self.node.pool.connection() as conn:
                cur = await conn.execute("SELECT 1 FROM crdt_rooms WHERE room = %s", (room,))
                return await cur.fetchone() is not None
        except psycopg.OperationalError as exc:
            raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc

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
