"""The PostgreSQL sessions of a room's judges and of a hub's shared writer, and deposing them.

Each session is named after what it serves (``application_name``): a judge's after its
room and fence (``crdt-judge:<room digest>:<fence>``, ``crdt-preload:<room digest>``
while it is preloaded), a hub's shared writer after the hub (``crdt-writer:<hub>``), and
each ends any transaction left idle for half a lease. A new owner ends the sessions of
the room's earlier judges (:func:`depose`): a paused one would hold row locks its new
writes wait for. Those are found by name, and by the ``pg_backend_pid()`` the last
fenced write recorded (another hub's shared writer: ended only when it sits idle inside
a transaction, since its other rooms share it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = [
    "depose",
    "judge_dsn",
    "judge_name",
    "preload_name",
    "take_over",
    "writer_dsn",
]


def _digest(room: str) -> str:
    return hashlib.sha1(room.encode()).hexdigest()[:16]


def judge_name(room: str, fence: int | None = None) -> str:
    """The ``application_name`` of a judge's PostgreSQL session (``None``: the prefix)."""
    return f"crdt-judge:{_digest(room)}:" + ("" if fence is None else str(fence))


def preload_name(room: str) -> str:
    """The ``application_name`` of a judge's session while it is preloaded (no :func:`depose`)."""
    return f"crdt-preload:{_digest(room)}"


def _session_dsn(dsn: str, name: str, lease_ttl: float) -> str:
    parts = conninfo_to_dict(dsn)
    timeout = max(100, int(lease_ttl * 500))
    options = f"{parts.get('options') or ''} -c idle_in_transaction_session_timeout={timeout}"
    return make_conninfo(dsn, options=options.strip(), application_name=name)


def judge_dsn(dsn: str, room: str, fence: int | None, lease_ttl: float) -> str:
    """Build the connection string of a judge's PostgreSQL session from ``dsn``.

    The session is named after its room and fence (see :func:`depose`; a preloaded
    judge's, ``fence`` ``None``, by :func:`preload_name` until its claim), and ends any
    transaction left idle for half a lease.
    """
    name = preload_name(room) if fence is None else judge_name(room, fence)
    return _session_dsn(dsn, name, lease_ttl)


def take_over(
    room: str, fence: int, mine: list[int], idle: float
) -> Callable[[psycopg.Connection[Any]], None]:
    """The setup of a preloaded judge's session after the claim: named, then :func:`depose`.

    All in the promotion's one round trip (its results are not read).
    """

    def setup(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT set_config('application_name', %s, false)", (judge_name(room, fence),))
        conn.execute(_DEPOSE, (judge_name(room) + "%", judge_name(room, fence)))
        conn.execute(_DEPOSE_WRITER, (room, mine, idle))

    return setup


_DEPOSE: Final = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE application_name LIKE %s AND application_name <> %s"
    " AND datname = current_database()"
)


def writer_dsn(dsn: str, hub_id: str, lease_ttl: float) -> str:
    """The connection string of a hub's shared writer session (named after the hub).

    Like a judge's, it ends any transaction left idle for half a lease.
    """
    return _session_dsn(dsn, f"crdt-writer:{hub_id}"[:63], lease_ttl)


_DEPOSE_WRITER: Final = """
SELECT count(pg_terminate_backend(a.pid)) FROM crdt_rooms r
JOIN pg_stat_activity a ON a.pid = r.judge_pid
WHERE r.room = %s AND a.datname = current_database() AND NOT a.pid = ANY(%s)
  AND a.state LIKE 'idle in transaction%%' AND a.state_change < now() - %s * interval '1 s'
"""


async def depose(
    conn: psycopg.AsyncConnection[Any],
    room: str,
    fence: int,
    *,
    mine: list[int] | None = None,
    idle: float = 0.1,
) -> int:
    """End the PostgreSQL sessions of the room's earlier judges; how many were ended.

    Only sessions in this connection's database: another cluster on the same server
    (another database) may have a room of the same name, whose judge is none of ours.

    A judge paused in the middle of a write transaction (SIGSTOP, a long GC pause) holds
    the row locks of what it wrote so far, and the new owner's first writes would wait for
    them until it wakes up. Its commit would be refused by the fence anyway, so the new
    owner ends its session at once (the hubs share a role, which may do that). Two kinds:

    - the room's own judge connections of earlier fences, found by ``application_name``;
    - the session that made the room's last fenced write (``crdt_rooms.judge_pid``: a
      hub's shared writer, which also writes other rooms), unless it is one of ``mine``
      (this hub's own writer), and only while it has been idle inside a transaction for
      more than ``idle`` seconds: a writer doing its work is left alone, a paused one is
      ended.
    """
    cur = await conn.execute(_DEPOSE, (judge_name(room) + "%", judge_name(room, fence)))
    row = await cur.fetchone()
    ended = int(row[0]) if row is not None else 0
    cur = await conn.execute(_DEPOSE_WRITER, (room, mine or [], idle))
    row = await cur.fetchone()
    return ended + (int(row[0]) if row is not None else 0)
