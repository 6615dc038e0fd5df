"""Reading and writing the rows of a state file (see :mod:`crdt_state._sqlite_file`).

Rows come back as the named records of the storage interface
(:mod:`crdt_state.journal`): :class:`StoredChange`, :class:`StoredRequest`,
:class:`BlameEntry`, :class:`ConflictRecord`. Knows SQL, not pycrdt or threads.
"""

from __future__ import annotations

import functools
import sqlite3
import time
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from . import _stored_rows as rows
from ._fold import FoldRows, fold_rows
from ._sql_params import (
    CONFLICT_COLUMNS,
    LOG_COLUMNS,
    conflict_filters,
    conflict_params,
    history_filters,
    log_params,
)
from ._sqlite_file import (
    descendants_range,
    path_key,
    transaction,
)
from .conflicts import Conflict, StateUpdate
from .errors import StorageError
from .journal import BlameEntry, ConflictRecord, StoredChange, StoredRequest, StoredState
from .paths import Path
from .requests import KEEP_REQUESTS
from .version import VersionVector

__all__ = [
    "append_changes",
    "append_conflicts",
    "blame_paths_upto",
    "blame_row",
    "checkpoint",
    "conflict_rows",
    "count_log",
    "fold_input",
    "history_rows",
    "insert_rows",
    "load",
    "recent_requests",
    "release_free_pages",
    "remember_request",
    "restart_at",
    "seq_of_token",
    "swap_snapshot",
    "values_sql",
]


def _log_row(row: Sequence[Any]) -> StoredChange:
    return rows.stored_change(row)


def load(conn: sqlite3.Connection, upto: int | None = None) -> StoredState:
    """The snapshot and the log rows after it (up to seq ``upto`` when given), in order.

    Raises :class:`StorageError` if the snapshot is missing or the seqs have a gap.
    """
    snap = _snapshot(conn)
    limit = upto if upto is not None else -1
    changes = [
        _log_row(r)
        for r in conn.execute(
            f"SELECT {LOG_COLUMNS} FROM log WHERE seq > ? AND (? < 0 OR seq <= ?) ORDER BY seq",
            (snap[0], limit, limit),
        )
    ]
    rows.check_gapless(changes, snap[0], rows.SQLITE)
    return StoredState(snap[0], snap[1], snap[2], changes)


def _snapshot(conn: sqlite3.Connection) -> tuple[int, VersionVector, bytes]:
    """The newest snapshot's seq, token and (decompressed) document update."""
    snap = conn.execute("SELECT seq, token, doc FROM snapshot ORDER BY seq DESC LIMIT 1").fetchone()
    if snap is None:
        raise StorageError("the state file is damaged: it has no snapshot")
    token = rows.token_of(snap[1], rows.SQLITE, "snapshot", snap[0])
    return snap[0], token, rows.decompressed(snap[2], rows.SQLITE, "snapshot", "doc", snap[0])


def fold_input(conn: sqlite3.Connection, upto: int) -> FoldRows | None:
    """What folding the log rows up to seq ``upto`` reads (see :mod:`crdt_state._fold`).

    Returns:
        ``None`` when no row follows the snapshot up to ``upto``.

    Raises:
        StorageError: the snapshot is missing or damaged, the seqs have a gap, or the
            last row's token is damaged.
    """
    snap = _snapshot(conn)
    found = conn.execute(
        "SELECT seq, doc_update FROM log WHERE seq > ? AND seq <= ? ORDER BY seq", (snap[0], upto)
    ).fetchall()
    if not found:
        return None
    last = found[-1][0]
    token = conn.execute("SELECT token FROM log WHERE seq = ?", (last,)).fetchone()[0]
    return fold_rows(snap, found, rows.token_of(token, rows.SQLITE, "log", last), rows.SQLITE)


def seq_of_token(conn: sqlite3.Connection, token: bytes) -> int | None:
    """The seq of the log row (or snapshot) whose token is ``token``."""
    row = conn.execute("SELECT seq FROM log WHERE token = ? ORDER BY seq DESC LIMIT 1", (token,))
    found = row.fetchone()
    if found is not None:
        return int(found[0])
    snap = conn.execute("SELECT seq FROM snapshot WHERE token = ?", (token,)).fetchone()
    return int(snap[0]) if snap is not None else None


def history_rows(
    conn: sqlite3.Connection, agent: str | None, since: float | None, until: float | None
) -> list[StoredChange]:
    """Stored changes, oldest first, filtered by agent and time."""
    clauses, params = history_filters(agent, since, until, "?")
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    cursor = conn.execute(f"SELECT {LOG_COLUMNS} FROM log{where} ORDER BY seq", params)
    return [_log_row(r) for r in cursor]


def blame_row(conn: sqlite3.Connection, path: Path) -> BlameEntry | None:
    """The newest blame row at ``path``, an ancestor of it, or a descendant."""
    keys = [path_key(path[:i]) for i in range(1, len(path) + 1)]
    low, high = descendants_range(path)
    marks = ",".join("?" * len(keys))
    found = conn.execute(
        f"SELECT path, seq, agent, time, token FROM blame WHERE path IN ({marks})"
        " OR (path >= ? AND path < ?) ORDER BY seq DESC LIMIT 1",
        [*keys, low, high],
    ).fetchone()
    if found is None:
        return None
    return rows.blame_entry(found)


def conflict_rows(
    conn: sqlite3.Connection, path: Path | None, since: float | None
) -> list[ConflictRecord]:
    """Audit-log rows, oldest first, at or below ``path``, from time ``since``."""
    clauses, params = conflict_filters(path, since, "?")
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    cursor = conn.execute(f"SELECT {CONFLICT_COLUMNS} FROM conflicts{where} ORDER BY id", params)
    return [rows.conflict_record(row) for row in cursor]


def count_log(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM log").fetchone()[0])


# -- writing -------------------------------------------------------------------
ROWS_PER_STATEMENT = 32
"""Rows one multi-row ``INSERT`` takes at most (7 columns: 224 parameters, far below
SQLite's smallest limit of 999); more rows take several statements."""


@functools.lru_cache(maxsize=256)
def values_sql(head: str, width: int, count: int) -> str:
    """``head VALUES (?, ...), ...``: ``count`` rows of ``width`` parameters (cached)."""
    row = "(" + ", ".join("?" * width) + ")"
    return f"{head} VALUES {', '.join([row] * count)}"


def insert_rows(conn: sqlite3.Connection, head: str, rows: Sequence[Sequence[Any]]) -> None:
    """``head VALUES (...), (...), ...``: ``rows`` in their order, in few statements.

    Equal to ``conn.executemany(head + " VALUES (?, ...)", rows)`` (rows are inserted
    in order, so with ``OR REPLACE`` a later row of the same key wins), but one
    statement per :data:`ROWS_PER_STATEMENT` rows: the sqlite3 module releases and
    takes back the GIL twice for every statement step, which ``executemany`` does
    per row; each time is a hand-off with the event loop's thread when a hub runs
    on that thread.
    """
    if not rows:
        return
    width = len(rows[0])
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        chunk = rows[start : start + ROWS_PER_STATEMENT]
        sql = values_sql(head, width, len(chunk))
        conn.execute(sql, [value for row in chunk for value in row])


def append_changes(conn: sqlite3.Connection, changes: Sequence[StateUpdate]) -> None:
    """Append changes (oldest first) with their blame, request ids and audited conflicts.

    A few statements for all of them (:func:`insert_rows` per table).
    """
    if not changes:
        return
    tokens = [c.token.to_state() for c in changes]
    log_rows = log_params(changes, tokens)
    insert_rows(conn, f"INSERT INTO log ({LOG_COLUMNS})", log_rows)
    insert_rows(
        conn,
        "INSERT OR REPLACE INTO blame (path, seq, agent, time, token)",
        [
            (path_key(p), c.seq, c.agent, c.time, t)
            for c, t in zip(changes, tokens, strict=True)
            for p in c.paths
        ],
    )
    for change, token in zip(changes, tokens, strict=True):
        if change.conflicts:
            append_conflicts(conn, change.conflicts, token, change.time, True)
    requests = [  # a change's paths column, already encoded for its log row
        (c.writer or "", c.request_id, c.seq, t, row[6], int(not c.conflicts))
        for c, t, row in zip(changes, tokens, log_rows, strict=True)
        if c.request_id is not None
    ]
    insert_rows(
        conn,
        "INSERT INTO writer_requests (writer, id, seq, token, paths, clean)",
        requests,
    )


def remember_request(
    conn: sqlite3.Connection, writer: str, request_id: int, seq: int, token: bytes, clean: bool
) -> None:
    """Store an applied request that wrote nothing (it has no change row); appended."""
    conn.execute(
        "INSERT INTO writer_requests (writer, id, seq, token, paths, clean)"
        " VALUES (?, ?, ?, ?, '[]', ?)",
        (writer, request_id, seq, token, int(clean)),
    )


def recent_requests(conn: sqlite3.Connection) -> list[StoredRequest]:
    """The newest :data:`KEEP_REQUESTS` remembered requests, oldest first.

    In the order they were applied (rowid). A key stored twice (applied again after
    the memory forgot it) comes back twice, the newer row last: loaded in this
    order into a :class:`~crdt_state.requests.RequestMemory`, the newer wins.
    """
    found = conn.execute(
        "SELECT writer, id, seq, token, paths, clean FROM writer_requests"
        " ORDER BY rowid DESC LIMIT ?",
        (KEEP_REQUESTS,),
    ).fetchall()
    return [rows.stored_request(row) for row in reversed(found)]


def forget_old_requests(conn: sqlite3.Connection) -> None:
    """Keep only the newest :data:`KEEP_REQUESTS` remembered requests."""
    conn.execute(
        "DELETE FROM writer_requests WHERE rowid < (SELECT rowid FROM writer_requests"
        " ORDER BY rowid DESC LIMIT 1 OFFSET ?)",
        (KEEP_REQUESTS,),
    )


def append_conflicts(
    conn: sqlite3.Connection,
    conflicts: Iterable[Conflict],
    token: bytes,
    when: float,
    applied: bool,
) -> None:
    """Add conflicts (and their resolutions) to the audit log."""
    insert_rows(
        conn,
        "INSERT INTO conflicts (time, path, base, current, incoming, current_agent,"
        " incoming_agent, policy, resolution, applied, token)",
        [(*row, int(applied), token) for row in conflict_params(conflicts, when)],
    )


def restart_at(conn: sqlite3.Connection, seq: int, token: bytes, snapshot: bytes) -> None:
    """Inside an open transaction: ``snapshot`` becomes the whole history up to ``seq``.

    Used when the document starts a new epoch (rebuilt from its content): the
    older snapshot and every log row up to ``seq`` are dropped. Blame and the
    conflict audit log are kept.
    """
    conn.execute(
        "INSERT INTO snapshot (seq, token, doc, time) VALUES (?, ?, ?, ?)",
        (seq, token, zlib.compress(snapshot), time.time()),
    )
    conn.execute("DELETE FROM snapshot WHERE seq < ?", (seq,))
    conn.execute("DELETE FROM log WHERE seq <= ?", (seq,))


def swap_snapshot(
    conn: sqlite3.Connection,
    seq: int,
    token: bytes,
    snapshot: bytes,
    gone_paths: Iterable[Path],
    keep_conflicts: int | None,
) -> None:
    """Replace the snapshot by one at ``seq`` and drop the log rows it covers (one transaction).

    Blame rows of ``gone_paths`` (absent from the new snapshot and not written
    since) are dropped, and the audit log is cut to its newest ``keep_conflicts`` rows.
    """
    with transaction(conn):
        conn.execute(
            "INSERT INTO snapshot (seq, token, doc, time) VALUES (?, ?, ?, ?)",
            (seq, token, zlib.compress(snapshot), time.time()),
        )
        conn.execute("DELETE FROM snapshot WHERE seq < ?", (seq,))
        conn.execute("DELETE FROM log WHERE seq <= ?", (seq,))
        conn.executemany(
            "DELETE FROM blame WHERE path = ? AND seq <= ?",
            [(path_key(p), seq) for p in gone_paths],
        )
        if keep_conflicts is not None:
            conn.execute(
                "DELETE FROM conflicts WHERE id <= (SELECT max(id) FROM conflicts) - ?",
                (keep_conflicts,),
            )
        forget_old_requests(conn)
    release_free_pages(conn)


def release_free_pages(conn: sqlite3.Connection) -> None:
    """Give the pages freed by deletions back to the file system (outside a transaction)."""
    # sqlite3's execute() steps a PRAGMA once (one page freed); executescript runs it to the end
    conn.executescript("PRAGMA incremental_vacuum;")


def blame_paths_upto(conn: sqlite3.Connection, seq: int) -> list[Path]:
    """Paths whose last write is at or before ``seq``."""
    cursor = conn.execute("SELECT path FROM blame WHERE seq <= ?", (seq,))
    return [rows.path_of(r[0], rows.SQLITE, "blame", r[0]) for r in cursor]


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the database file and truncate it."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
