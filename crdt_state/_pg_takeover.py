"""A read-only PostgreSQL store becoming its key's writer: what it must read first.

A reader that loaded a key while its writer still committed (the hub cluster's judge,
loaded before its claim) turns into the writer once the old one can commit no more
(the caller's business: the cluster's fence). Its connection is set up as a writer's,
then one transaction reads everything committed since the load: the log rows after the
loaded ones and the newest remembered requests. If the old writer folded those rows
into a newer snapshot meanwhile (a compaction or a new epoch), nothing can continue the
loaded state: the caller opens the key afresh. Knows SQL, not pycrdt or threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _pg_log as pglog
from ._pg_connect import Durability, failures, prepare
from .errors import StorageError
from .journal import StoredChange, StoredRequest

if TYPE_CHECKING:
    import psycopg

__all__ = ["take_writes"]


def take_writes(
    conn: psycopg.Connection[Any],
    key: str,
    where: str,
    loaded_seq: int,
    durability: Durability,
    lock: bool,
    setup: Callable[[psycopg.Connection[Any]], None] | None,
) -> tuple[list[StoredChange], list[StoredRequest], int]:
    """Set a reader's ``conn`` up as the writer's; what was committed after ``loaded_seq``.

    ``setup(conn)`` runs first, outside any transaction. Then the tables are checked (or
    migrated), the commit mode set and the key's lock taken if ``lock`` (as a writer's
    connection is opened), and one transaction reads the rest.

    Returns:
        The log rows after seq ``loaded_seq`` (oldest first, gapless), the newest
        remembered requests (oldest first), and how many log rows the key has.

    Raises:
        StorageError: ``"reload"`` when the rows after ``loaded_seq`` were folded into a
            snapshot; or the connection or a query failed (the connection may then be
            closed).
    """
    with failures("cannot set up the writer", where):
        if setup is not None:
            setup(conn)
        conn.read_only = False
    prepare(conn, key, where, durability=durability, lock=lock, read_only=False)
    with failures("cannot read the stored state", where):
        with conn.transaction():  # still the reader's isolation: one consistent version
            newer = pglog.load_after(conn, key, loaded_seq)
            requests = pglog.recent_requests(conn, key)
            rows = pglog.count_log(conn, key)
        conn.isolation_level = None  # the server's default, as a writer's connection
    if newer is None:
        raise StorageError(
            f"the stored rows after seq {loaded_seq} were folded into a snapshot since the"
            " state was loaded: open it afresh",
            details={"database": where, "reason": "reload"},
        )
    return newer, requests, rows
