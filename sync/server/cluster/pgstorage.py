"""Cluster rooms in PostgreSQL: :class:`~crdt_state.postgres.PostgresStore`, one key per room.

- The **judge** (owner only) is ``open_postgres(dsn, room, before_commit=hook)``: every
  write transaction of its store ends with :func:`fenced_position`, one statement that
  locks the room's ``crdt_rooms`` row, checks the owner's fencing number (raising
  :class:`~sync.server.cluster.errors.Fenced`, which rolls the transaction back and fails
  the store) and records the ``in`` position whose judgement is committed. The judge is
  opened *after* the fence was claimed, so it sees every write of earlier owners.
- Before opening its judge, a new owner ends the PostgreSQL sessions of earlier judges of
  the room (:func:`depose`): a paused one would hold row locks its new writes wait for.
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
import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from crdt_state import SharedState
from crdt_state.errors import StorageError
from crdt_state.postgres import load_stored, open_postgres
from crdt_state.takeover import preload, promote
from sync.server.cluster.context import NodeContext
from sync.server.cluster.errors import ClusterUnavailable, Fenced
from sync.server.cluster.ownership import Ownership

log = logging.getLogger("crdt_state.cluster")

__all__ = [
    "PositionHook",
    "PostgresRoomStorage",
    "fenced_position",
    "judge_dsn",
    "preload_name",
]

_FENCED_POSITION: Final = """
UPDATE crdt_rooms SET stream_position = coalesce(%s, stream_position)
WHERE room = %s AND fence = %s
RETURNING fence
"""


def fenced_position(
    conn: psycopg.Connection[Any], room: str, fence: int, position: str | None
) -> None:
    """Check ``fence`` and record ``position``, inside a write transaction.

    The check locks the room's row until commit; a ``position`` of ``None`` keeps the
    stored one.

    Raises:
        Fenced: ``fence`` is no longer the room's (another hub claimed it).
    """
    row = conn.execute(_FENCED_POSITION, (position, room, fence)).fetchone()
    if row is None:
        current = conn.execute("SELECT fence FROM crdt_rooms WHERE room = %s", (room,)).fetchone()
        raise Fenced(room, fence, int(current[0]) if current is not None else None)


def _digest(room: str) -> str:
    return hashlib.sha1(room.encode()).hexdigest()[:16]


def judge_name(room: str, fence: int | None = None) -> str:
    """The ``application_name`` of a judge's PostgreSQL session (``None``: the prefix)."""
    return f"crdt-judge:{_digest(room)}:" + ("" if fence is None else str(fence))


def preload_name(room: str) -> str:
    """The ``application_name`` of a judge's session while it is preloaded (no :func:`depose`)."""
    return f"crdt-preload:{_digest(room)}"


def judge_dsn(dsn: str, room: str, fence: int | None, lease_ttl: float) -> str:
    """Build the connection string of a judge's PostgreSQL session from ``dsn``.

    The session is named after its room and fence (see :func:`depose`; a preloaded
    judge's, ``fence`` ``None``, by :func:`preload_name` until its claim), and ends any
    transaction left idle for half a lease.
    """
    parts = conninfo_to_dict(dsn)
    timeout = max(100, int(lease_ttl * 500))
    options = f"{parts.get('options') or ''} -c idle_in_transaction_session_timeout={timeout}"
    name = preload_name(room) if fence is None else judge_name(room, fence)
    return make_conninfo(dsn, options=options.strip(), application_name=name)


def _take_over(room: str, fence: int) -> Callable[[psycopg.Connection[Any]], None]:
    """The setup of a preloaded judge's session after the claim: named, then :func:`depose`.

    Both in the promotion's one round trip (its results are not read).
    """

    def setup(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT set_config('application_name', %s, false)", (judge_name(room, fence),))
        conn.execute(_DEPOSE, (judge_name(room) + "%", judge_name(room, fence)))

    return setup


_DEPOSE: Final = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE application_name LIKE %s AND application_name <> %s"
    " AND datname = current_database()"
)


async def depose(conn: psycopg.AsyncConnection[Any], room: str, fence: int) -> int:
    """End the PostgreSQL sessions of the room's earlier judges; how many were ended.

    Only sessions in this connection's database: another cluster on the same server
    (another database) may have a room of the same name, whose judge is none of ours.

    A judge paused in the middle of a write transaction (SIGSTOP, a long GC pause) holds
    the row locks of what it wrote so far, and the new owner's first writes would wait for
    them until it wakes up. Its commit would be refused by the fence anyway, so the new
    owner ends its session at once (the hubs share a role, which may do that).
    """
    cur = await conn.execute(_DEPOSE, (judge_name(room) + "%", judge_name(room, fence)))
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


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

    async def open_replica(self, room: str) -> SharedState:
        """Load the room's stored snapshot and changes into a follower replica."""
        stored = await asyncio.to_thread(load_stored, self.dsn, room)
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
        if preloaded is not None:
            try:
                # after the claim committed: every row of an earlier fence is final. Named
                # as the judge and earlier judges ended in the same round trip
                caught = await asyncio.to_thread(
                    promote, preloaded, hook, setup=_take_over(room, fence)
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
                ended = await depose(conn, room, fence)
        except psycopg.Error as exc:  # not allowed, or unavailable: the fence still holds
            log.warning("room %r: cannot end earlier judges' sessions: %s", room, exc)
            ended = 0
        if ended:
            log.info("room %r: ended %d session(s) of earlier owners", room, ended)
        state = await asyncio.to_thread(
            open_postgres,
            judge_dsn(self.dsn, room, fence, self.node.lease_ttl),
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
