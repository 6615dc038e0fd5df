"""Reading and writing the rows of one key in the PostgreSQL tables (:mod:`._pg_schema`).

The same rows, encodings and semantics as the SQLite format
(:mod:`crdt_state._sqlite_log`): rows come back as the records of the storage
interface (:mod:`crdt_state.journal`). Every function takes the connection
and the state's ``key``; the writing ones run inside the caller's
transaction. Knows SQL, not pycrdt or threads.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from . import _stored_rows as rows
from ._fold import FoldRows, fold_rows
from ._sql_params import (
    CONFLICT_COLUMNS,
    LOG_COLUMNS,
    conflict_filters,
    conflict_params,
    history_filters,
    log_params,
    paths_json,
)
from ._sqlite_file import descendants_range, path_key
from .conflicts import Conflict, StateUpdate
from .errors import StorageError
from .journal import BlameEntry, ConflictRecord, StoredChange, StoredRequest, StoredState
from .paths import Path
from .requests import KEEP_REQUESTS
from .version import VersionVector

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[Any]

__all__ = [
    "INSERT_CONFLICTS",
    "NOUN",
    "INSERT_LOG",
    "UPSERT_BLAME",
    "UPSERT_REQUEST",
    "append_changes",
    "append_conflicts",
    "blame_paths_upto",
    "blame_row",
    "conflict_rows",
    "count_log",
    "create",
    "exists",
    "fold_input",
    "history_rows",
    "load",
    "requests_of",
    "RECENT_REQUESTS",
    "recent_requests",
    "remember_request",
    "restart_at",
    "seq_of_token",
    "swap_snapshot",
]

NOUN: Final = "stored state"


def _log_row(row: Sequence[Any]) -> StoredChange:
    return rows.stored_change(row, NOUN)


def exists(conn: Conn, key: str) -> bool:
    """True when ``key`` has stored rows (a snapshot, or log rows left without one: damage)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM crdt_store_snapshot WHERE key = %s)"
        " OR EXISTS (SELECT 1 FROM crdt_store_log WHERE key = %s)",
        (key, key),
    ).fetchone()
    return bool(row and row[0])


def load(conn: Conn, key: str, upto: int | None = None) -> StoredState:
    """The snapshot and the log rows after it (up to seq ``upto`` when given), in order.

    Raises:
        StorageError: the snapshot is missing or does not decompress, or the seqs have a gap.
    """
    snap = _snapshot(conn, key)
    limit = upto if upto is not None else -1
    changes = [
        _log_row(r)
        for r in conn.execute(
            f"SELECT {LOG_COLUMNS} FROM crdt_store_log WHERE key = %s AND seq > %s"
            " AND (%s < 0 OR seq <= %s) ORDER BY seq",
            (key, snap[0], limit, limit),
            binary=True,  # bytea as bytes, without the hex text encoding
        )
    ]
    rows.check_gapless(changes, snap[0], NOUN)
    return StoredState(snap[0], snap[1], snap[2], changes)


def _snapshot(conn: Conn, key: str) -> tuple[int, VersionVector, bytes]:
    """The newest snapshot's seq, token and (decompressed) document update."""
    snap = conn.execute(
        "SELECT seq, token, doc FROM crdt_store_snapshot WHERE key = %s ORDER BY seq DESC LIMIT 1",
        (key,),
        binary=True,
    ).fetchone()
    if snap is None:
        raise StorageError("the stored state is damaged: it has no snapshot")
    token = rows.token_of(snap[1], NOUN, "snapshot", snap[0])
    return int(snap[0]), token, rows.decompressed(snap[2], NOUN, "snapshot", "doc", snap[0])


def fold_input(conn: Conn, key: str, upto: int) -> FoldRows | None:
    """What folding the log rows of ``key`` up to seq ``upto`` reads (:mod:`crdt_state._fold`).

    Returns:
        ``None`` when no row follows the snapshot up to ``upto``.

    Raises:
        StorageError: the snapshot is missing or damaged, the seqs have a gap, or the
            last row's token is damaged.
    """
    snap = _snapshot(conn, key)
    found = conn.execute(
        "SELECT seq, doc_update FROM crdt_store_log WHERE key = %s AND seq > %s AND seq <= %s"
        " ORDER BY seq",
        (key, snap[0], upto),
        binary=True,
    ).fetchall()
    if not found:
        return None
    last = int(found[-1][0])
    token = conn.execute(
        "SELECT token FROM crdt_store_log WHERE key = %s AND seq = %s", (key, last), binary=True
    ).fetchone()
    assert token is not None  # the row was just read, in the same transaction
    updates = [(int(seq), update) for seq, update in found]
    return fold_rows(snap, updates, rows.token_of(token[0], NOUN, "log", last), NOUN)


def create(
    conn: Conn,
    key: str,
    snapshot_seq: int,
    token: bytes,
    snapshot: bytes,
    blame: Iterable[tuple[Path, int, str | None, float, bytes]],
) -> None:
    """Store the first snapshot of ``key`` and the blame of its changes."""
    conn.execute(
        "INSERT INTO crdt_store_snapshot (key, seq, token, doc, time) VALUES (%s, %s, %s, %s, %s)",
        (key, snapshot_seq, token, zlib.compress(snapshot), time.time()),
    )
    _upsert_blame(conn, [(key, path_key(p), s, a, w, t) for p, s, a, w, t in blame])


UPSERT_BLAME: Final = (
    "INSERT INTO crdt_store_blame (key, path, seq, agent, time, token)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (key, path) DO UPDATE"
    " SET seq = excluded.seq, agent = excluded.agent, time = excluded.time,"
    " token = excluded.token"
)
"""The blame upsert, one row per execution (see :mod:`._pg_unnest` for its round form)."""


def _upsert_blame(conn: Conn, rows: list[tuple[str, str, int, str | None, float, bytes]]) -> None:
    if rows:
        conn.cursor().executemany(UPSERT_BLAME, rows)


def seq_of_token(conn: Conn, key: str, token: bytes) -> int | None:
    """The seq of the log row (or snapshot) whose token is ``token``."""
    found = conn.execute(
        "SELECT seq FROM crdt_store_log WHERE key = %s AND md5(token) = md5(%s) AND token = %s"
        " ORDER BY seq DESC LIMIT 1",
        (key, token, token),
    ).fetchone()
    if found is not None:
        return int(found[0])
    snap = conn.execute(
        "SELECT seq FROM crdt_store_snapshot WHERE key = %s AND token = %s", (key, token)
    ).fetchone()
    return int(snap[0]) if snap is not None else None


def history_rows(
    conn: Conn, key: str, agent: str | None, since: float | None, until: float | None
) -> list[StoredChange]:
    """Stored changes, oldest first, filtered by agent and time."""
    clauses, params = history_filters(agent, since, until, "%s")
    where = " AND ".join(["key = %s", *clauses])
    cursor = conn.execute(
        f"SELECT {LOG_COLUMNS} FROM crdt_store_log WHERE {where} ORDER BY seq", [key, *params]
    )
    return [_log_row(r) for r in cursor]


def blame_row(conn: Conn, key: str, path: Path) -> BlameEntry | None:
    """The newest blame row at ``path``, an ancestor of it, or a descendant."""
    keys = [path_key(path[:i]) for i in range(1, len(path) + 1)]
    low, high = descendants_range(path)
    found = conn.execute(
        "SELECT path, seq, agent, time, token FROM crdt_store_blame WHERE key = %s"
        " AND (path = ANY(%s) OR (path >= %s AND path < %s)) ORDER BY seq DESC LIMIT 1",
        (key, keys, low, high),
    ).fetchone()
    if found is None:
        return None
    return rows.blame_entry(found, NOUN)


def conflict_rows(
    conn: Conn, key: str, path: Path | None, since: float | None
) -> list[ConflictRecord]:
    """Audit-log rows, oldest first, at or below ``path``, from time ``since``."""
    clauses, params = conflict_filters(path, since, "%s")
    where = " AND ".join(["key = %s", *clauses])
    cursor = conn.execute(
        f"SELECT {CONFLICT_COLUMNS} FROM crdt_store_conflicts WHERE {where} ORDER BY id",
        [key, *params],
    )
    return [rows.conflict_record(row, NOUN) for row in cursor]


def count_log(conn: Conn, key: str) -> int:
    row = conn.execute("SELECT count(*) FROM crdt_store_log WHERE key = %s", (key,)).fetchone()
    return int(row[0]) if row is not None else 0


RECENT_REQUESTS: Final = (
    "SELECT writer, id, seq, token, paths, clean FROM crdt_store_requests WHERE key = %s"
    " ORDER BY n DESC LIMIT %s"
)
"""The newest remembered requests of a key (``key``, ``limit``), newest first."""


def recent_requests(conn: Conn, key: str) -> list[StoredRequest]:
    """The newest :data:`KEEP_REQUESTS` remembered requests, oldest first."""
    return requests_of(conn.execute(RECENT_REQUESTS, (key, KEEP_REQUESTS)).fetchall())


def requests_of(found: Sequence[Sequence[Any]]) -> list[StoredRequest]:
    """The rows of :data:`RECENT_REQUESTS` as requests, oldest first."""
    return [rows.stored_request(row, NOUN) for row in reversed(found)]


# -- writing (inside the caller's transaction) -----------------------------------------
UPSERT_REQUEST: Final = (
    "INSERT INTO crdt_store_requests (key, writer, id, seq, token, paths, clean)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key, writer, id) DO UPDATE"
    " SET seq = excluded.seq, token = excluded.token, paths = excluded.paths,"
    " clean = excluded.clean, n = nextval('crdt_store_requests_n')"
)
"""The remembered-request upsert, one row per execution."""
INSERT_LOG: Final = (
    f"INSERT INTO crdt_store_log (key, {LOG_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
"""The change-log insert, one row per execution."""
INSERT_CONFLICTS: Final = (
    "INSERT INTO crdt_store_conflicts (key, time, path, base, current, incoming,"
    " current_agent, incoming_agent, policy, resolution, applied, token)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
"""The audit-log insert, one row per execution."""


def append_changes(conn: Conn, key: str, changes: Sequence[StateUpdate]) -> None:
    """Append changes (oldest first) with their blame, request ids and audited conflicts."""
    if not changes:
        return
    tokens = [c.token.to_state() for c in changes]
    pairs = list(zip(changes, tokens, strict=True))
    conn.cursor().executemany(INSERT_LOG, [(key, *row) for row in log_params(changes, tokens)])
    newest: dict[str, tuple[str, str, int, str | None, float, bytes]] = {}
    for c, t in pairs:  # one row per path: the newest write (an upsert may not repeat a key)
        for p in c.paths:
            written = path_key(p)
            newest[written] = (key, written, c.seq, c.agent, c.time, t)
    _upsert_blame(conn, list(newest.values()))
    for change, token in pairs:
        if change.conflicts:
            append_conflicts(conn, key, change.conflicts, token, change.time, True)
    requests = [
        (key, c.writer or "", c.request_id, c.seq, t, paths_json(c.paths), not c.conflicts)
        for c, t in pairs
        if c.request_id is not None
    ]
    if requests:
        conn.cursor().executemany(UPSERT_REQUEST, requests)


def remember_request(
    conn: Conn, key: str, writer: str, request_id: int, seq: int, token: bytes, clean: bool
) -> None:
    """Store an applied request that wrote nothing (it has no change row)."""
    conn.execute(UPSERT_REQUEST, (key, writer, request_id, seq, token, "[]", clean))


def append_conflicts(
    conn: Conn,
    key: str,
    conflicts: Iterable[Conflict],
    token: bytes,
    when: float,
    applied: bool,
) -> None:
    """Add conflicts (and their resolutions) to the audit log."""
    rows = [(key, *row, applied, token) for row in conflict_params(conflicts, when)]
    if rows:
        conn.cursor().executemany(INSERT_CONFLICTS, rows)


def restart_at(conn: Conn, key: str, seq: int, token: bytes, snapshot: bytes) -> None:
    """``snapshot`` becomes the whole history up to ``seq`` (a new epoch).

    The older snapshot and every log row up to ``seq`` are dropped; blame and
    the audit log are kept.
    """
    _replace_snapshot(conn, key, seq, token, snapshot)


def _replace_snapshot(conn: Conn, key: str, seq: int, token: bytes, snapshot: bytes) -> None:
    conn.execute(
        "INSERT INTO crdt_store_snapshot (key, seq, token, doc, time) VALUES (%s, %s, %s, %s, %s)",
        (key, seq, token, zlib.compress(snapshot), time.time()),
    )
    conn.execute("DELETE FROM crdt_store_snapshot WHERE key = %s AND seq < %s", (key, seq))
    conn.execute("DELETE FROM crdt_store_log WHERE key = %s AND seq <= %s", (key, seq))


def swap_snapshot(
    conn: Conn,
    key: str,
    seq: int,
    token: bytes,
    snapshot: bytes,
    gone_paths: Iterable[Path],
    keep_conflicts: int | None,
) -> None:
    """Replace the snapshot by one at ``seq`` and drop the log rows it covers.

    Blame rows of ``gone_paths`` (absent from the new snapshot and not written
    since) are dropped, the audit log is cut to its newest ``keep_conflicts``
    rows and the remembered requests to the newest :data:`KEEP_REQUESTS`.
    """
    _replace_snapshot(conn, key, seq, token, snapshot)
    gone = [path_key(p) for p in gone_paths]
    if gone:
        conn.execute(
            "DELETE FROM crdt_store_blame WHERE key = %s AND path = ANY(%s) AND seq <= %s",
            (key, gone, seq),
        )
    if keep_conflicts == 0:
        conn.execute("DELETE FROM crdt_store_conflicts WHERE key = %s", (key,))
    elif keep_conflicts is not None:  # ids are shared by all keys: count this key's rows
        conn.execute(
            "DELETE FROM crdt_store_conflicts WHERE key = %s AND id < (SELECT id FROM"
            " crdt_store_conflicts WHERE key = %s ORDER BY id DESC LIMIT 1 OFFSET %s)",
            (key, key, keep_conflicts - 1),
        )
    conn.execute(
        "DELETE FROM crdt_store_requests WHERE key = %s AND n < (SELECT n FROM"
        " crdt_store_requests WHERE key = %s ORDER BY n DESC LIMIT 1 OFFSET %s)",
        (key, key, KEEP_REQUESTS),
    )


def blame_paths_upto(conn: Conn, key: str, seq: int) -> list[Path]:
    """Paths whose last write is at or before ``seq``."""
    cursor = conn.execute(
        "SELECT path FROM crdt_store_blame WHERE key = %s AND seq <= %s", (key, seq)
    )
    return [rows.path_of(r[0], NOUN, "blame", r[0]) for r in cursor]
