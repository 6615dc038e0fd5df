"""A read-only PostgreSQL store becoming its key's writer: what it must read first.

A reader that loaded a key while its writer still committed (the hub cluster's judge,
loaded before its claim) turns into the writer once the old one can commit no more
(the caller's business: the cluster's fence). Two steps, so that the second, which
the caller waits for, is one round trip:

- :func:`get_ready` (any time before): the tables checked (or migrated) and the commit
  mode set, as for a writer's connection; the connection still only reads;
- :func:`take_writes`: in one pipeline, the caller's ``setup``, the key's lock if asked,
  and one transaction reading everything committed since the load: the log rows after
  the loaded ones, the newest remembered requests, the number of log rows.

If the old writer folded the rows after the load into a newer snapshot meanwhile (a
compaction or a new epoch), nothing can continue the loaded state: the caller opens the
key afresh. Knows SQL, not pycrdt or threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _pg_log as pglog
from . import _pg_schema as pgschema
from . import _stored_rows as rows
from ._pg_connect import SYNCHRONOUS_COMMIT, Durability, failures
from ._sql_params import LOG_COLUMNS
from .errors import StorageError
from .journal import StoredChange, StoredRequest
from .requests import KEEP_REQUESTS

if TYPE_CHECKING:
    import psycopg

__all__ = ["get_ready", "rows_after", "take_writes"]


def get_ready(conn: psycopg.Connection[Any], where: str, durability: Durability) -> None:
    """Check (or migrate) the tables and set the commit mode of a reader's ``conn``.

    It stays a reader (its transactions read only) until :func:`take_writes`.

    Raises:
        StorageError: the tables are newer, or the server failed.
    """
    with failures("cannot set up the writer", where):
        conn.read_only = False  # a migration writes the tables (not the key's rows)
        try:
            pgschema.migrate(conn, where)
        finally:
            conn.read_only = True
        conn.execute(f"SET synchronous_commit = {SYNCHRONOUS_COMMIT[durability]}")


def take_writes(
    conn: psycopg.Connection[Any],
    key: str,
    where: str,
    loaded_seq: int,
    lock: bool,
    setup: Callable[[psycopg.Connection[Any]], None] | None,
) -> tuple[list[StoredChange], list[StoredRequest], int]:
    """Make a reader's ``conn`` (after :func:`get_ready`) the writer's; what came since.

    One pipeline: ``setup(conn)`` (which must not read results), the key's advisory lock
    if ``lock``, and one transaction (the reader's isolation: one consistent version)
    reading what was committed after seq ``loaded_seq``.

    Returns:
        The log rows after ``loaded_seq`` (oldest first, gapless), the newest remembered
        requests (oldest first), and how many log rows the key has.

    Raises:
        StorageError: ``"reload"`` when the rows after ``loaded_seq`` were folded into a
            snapshot, ``"in_use"`` when the lock is held elsewhere, or a query failed.
    """
    with failures("cannot take over the stored state", where):
        with conn.pipeline():
            if setup is not None:
                setup(conn)
            locked = (
                conn.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (pgschema.ADVISORY_CLASS, key)
                )
                if lock
                else None
            )
            with conn.transaction():
                newer = rows_after(conn, key, loaded_seq)
                requests = conn.execute(pglog.RECENT_REQUESTS, (key, KEEP_REQUESTS))
                count = conn.execute("SELECT count(*) FROM crdt_store_log WHERE key = %s", (key,))
        held = locked.fetchone() if locked is not None else (True,)
        if held is None or not held[0]:
            raise StorageError(
                "the state is open in another process or connection (its PostgreSQL lock is held)",
                details={"database": where, "reason": "in_use"},
            )
        changes = newer()
        found = requests.fetchall()
        total = count.fetchone()
    if changes is None:
        raise StorageError(
            f"the stored rows after seq {loaded_seq} were folded into a snapshot since the"
            " state was loaded: open it afresh",
            details={"database": where, "reason": "reload"},
        )
    conn.read_only = False
    conn.isolation_level = None  # the server's default, as a writer's connection
    return changes, pglog.requests_of(found), int(total[0]) if total is not None else 0


def rows_after(
    conn: psycopg.Connection[Any], key: str, seq: int
) -> Callable[[], list[StoredChange] | None]:
    """Send the queries of the log rows after seq ``seq``; a function reading their answer.

    Pipeline-friendly: nothing is read until that function is called (after the
    pipeline synced). It returns the rows in order, or ``None`` when a newer snapshot
    folded them.

    Raises:
        StorageError: (when reading) the key has no snapshot, or the seqs have a gap.
    """
    snap = conn.execute("SELECT max(seq) FROM crdt_store_snapshot WHERE key = %s", (key,))
    log = conn.execute(
        f"SELECT {LOG_COLUMNS} FROM crdt_store_log WHERE key = %s AND seq > %s ORDER BY seq",
        (key, seq),
        binary=True,
    )

    def read() -> list[StoredChange] | None:
        newest = snap.fetchone()
        if newest is None or newest[0] is None:
            raise StorageError("the stored state is damaged: it has no snapshot")
        if int(newest[0]) > seq:
            return None
        changes = [rows.stored_change(r, pglog.NOUN) for r in log.fetchall()]
        rows.check_gapless(changes, seq, pglog.NOUN)
        return changes

    return read
