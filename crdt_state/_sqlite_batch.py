"""A batch of plain changes in one SQLite statement (one commit, one sync).

A view of the connection only (``temp``: nothing in the file) whose ``INSTEAD OF``
triggers file its rows into ``log``, ``blame`` and ``writer_requests``; a batch with
no conflicts, audits or epochs goes in as one multi-row ``INSERT`` into it
(:func:`append_changes_at_once`), outside a transaction. Used by
:func:`crdt_state._sqlite_writes.write_batch`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from ._sql_params import LOG_COLUMNS, log_params
from ._sqlite_file import path_key
from ._sqlite_log import values_sql
from .conflicts import StateUpdate

__all__ = ["AT_ONCE_ROWS", "BATCH_ROWS", "append_changes_at_once", "prepare_batch_rows"]

BATCH_ROWS: Final = (
    "CREATE TEMP VIEW IF NOT EXISTS batch_rows AS SELECT NULL AS kind, NULL AS a, NULL AS b,"
    " NULL AS c, NULL AS d, NULL AS e, NULL AS f, NULL AS g WHERE 0",
    "CREATE TEMP TRIGGER IF NOT EXISTS batch_log INSTEAD OF INSERT ON batch_rows"
    f" WHEN NEW.kind = 0 BEGIN INSERT INTO log ({LOG_COLUMNS})"
    " VALUES (NEW.a, NEW.b, NEW.c, NEW.d, NEW.e, NEW.f, NEW.g); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS batch_blame INSTEAD OF INSERT ON batch_rows"
    " WHEN NEW.kind = 1 BEGIN INSERT OR REPLACE INTO blame (path, seq, agent, time, token)"
    " VALUES (NEW.a, NEW.b, NEW.c, NEW.d, NEW.e); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS batch_request INSTEAD OF INSERT ON batch_rows"
    " WHEN NEW.kind = 2 BEGIN INSERT INTO writer_requests"
    " (writer, id, seq, token, paths, clean) VALUES (NEW.a, NEW.b, NEW.c, NEW.d, NEW.e, NEW.f);"
    " END",
)
"""A view of this connection only (``temp``: nothing in the file) whose rows its
triggers file into ``log`` (kind 0), ``blame`` (1) or ``writer_requests`` (2):
:func:`append_changes_at_once` inserts a whole batch through it in one statement."""

AT_ONCE_ROWS: Final = 120
"""Rows :func:`append_changes_at_once` takes at most (8 parameters each: 960, below
SQLite's smallest limit of 999 parameters a statement)."""


def prepare_batch_rows(conn: sqlite3.Connection) -> None:
    """Create this connection's :data:`BATCH_ROWS` view and triggers (once per connection)."""
    for statement in BATCH_ROWS:
        conn.execute(statement)


def append_changes_at_once(conn: sqlite3.Connection, changes: Sequence[StateUpdate]) -> bool:
    """Store ``changes`` (none with conflicts) in one statement, outside any transaction.

    The statement is its own transaction (one commit, one sync): the rows of
    :func:`crdt_state._sqlite_log.append_changes`, in its order, through the :data:`BATCH_ROWS` view
    (:func:`prepare_batch_rows` first). One statement steps once: the sqlite3
    module releases and takes back the GIL twice for the whole batch instead of
    twice for each of ``BEGIN``, every insert statement and ``COMMIT``; each time
    can wait for the event loop's thread of a hub.

    Returns:
        False, having done nothing, when the rows are more than :data:`AT_ONCE_ROWS`
        (store them with :func:`~crdt_state._sqlite_log.append_changes` in a transaction).

    Raises:
        sqlite3.Error: the database refused the write (nothing is stored).
    """
    count = sum(1 + len(c.paths) + (c.request_id is not None) for c in changes)
    if count > AT_ONCE_ROWS:
        return False  # before any row is built: the transaction path builds them
    tokens = [c.token.to_state() for c in changes]
    log_rows = log_params(changes, tokens)
    rows: list[tuple[Any, ...]] = [(0, *row) for row in log_rows]
    rows += [
        (1, path_key(p), c.seq, c.agent, c.time, t, None, None)
        for c, t in zip(changes, tokens, strict=True)
        for p in c.paths
    ]
    rows += [
        (2, c.writer or "", c.request_id, c.seq, t, row[6], 1, None)
        for c, t, row in zip(changes, tokens, log_rows, strict=True)
        if c.request_id is not None
    ]
    sql = values_sql("INSERT INTO batch_rows (kind, a, b, c, d, e, f, g)", 8, len(rows))
    conn.execute(sql, [value for row in rows for value in row])
    return True
