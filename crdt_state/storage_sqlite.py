"""The SQLite file format of durable states, and every SQL statement on it.

A state file is an ordinary SQLite database (WAL journal) marked with
``PRAGMA application_id`` = :data:`APPLICATION_ID` and ``PRAGMA user_version``
= :data:`FORMAT_VERSION`. Its tables::

    meta       (key, value)            format facts, creation time
    snapshot   (seq, token, doc, time) one Yjs update (zlib-compressed) holding
                                       every change up to log position ``seq``
                                       (one row; compaction inserts the new row
                                       and deletes the old one in one transaction)
    log        (seq, token, doc_update, agent, origin, time, paths)
                                       the changes after the snapshot, append-only,
                                       contiguous seqs; ``token`` is the state's
                                       version after the change
    blame      (path, seq, agent, time, token)
                                       the last change that wrote each path
    conflicts  (id, time, path, base, current, incoming, current_agent,
                incoming_agent, policy, resolution, applied, token)
                                       the conflict audit log
    writer_requests (writer, id, seq, token, paths, clean)
                                       the newest applied requests, unique per
                                       ``(writer, id)`` (see ``crdt_state.requests``);
                                       ``seq`` is the change they made (the head
                                       seq, and ``paths`` ``[]``, when they wrote
                                       nothing); ``clean``: applied without conflict

Format 1 files kept requests by id alone (table ``requests``); opening one
moves those rows to ``writer_requests`` (writer = the agent of their change)
and marks the file format 2, in one transaction.

Paths are stored as ASCII JSON arrays (``["customer","tier"]``), so the
descendants of a path are one key range. Values in the audit log are JSON
wrapped so that "absent" and "unresolved" stay distinct from any data.

This module knows SQL and the file; it does not know pycrdt or threads. A
connection returned by :func:`connect` holds the file's lock
(``locking_mode=EXCLUSIVE``) until it is closed: a second connection, from
this process or another, is refused with :class:`StorageError`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from .conflicts import UNRESOLVED, Conflict
from .errors import StorageError
from .paths import Path
from .requests import KEEP_REQUESTS
from .values import MISSING

__all__ = [
    "APPLICATION_ID",
    "FORMAT_VERSION",
    "ChangeRow",
    "Durability",
    "LogRow",
    "RequestRow",
    "Stored",
    "connect",
    "decode_value",
    "encode_value",
    "path_key",
]

APPLICATION_ID: Final = 0x63727374  # "crst"
FORMAT_VERSION: Final = 2
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"

Durability = Literal["full", "normal", "off"]
_SYNCHRONOUS: Final[dict[str, str]] = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}

_REQUESTS_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS writer_requests (writer TEXT NOT NULL, id INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, token BLOB NOT NULL, paths TEXT NOT NULL, clean INTEGER NOT NULL,"
    " UNIQUE (writer, id))"
)
_MIGRATE_REQUESTS: Final = (
    "INSERT OR IGNORE INTO writer_requests (writer, id, seq, token, paths, clean)"
    " SELECT coalesce(log.agent, ''), r.id, r.seq, r.token, r.paths, 0"
    " FROM requests AS r LEFT JOIN log ON log.seq = r.seq ORDER BY r.seq",
    "DROP TABLE requests",
    f"PRAGMA user_version={FORMAT_VERSION}",
    f"UPDATE meta SET value = '{FORMAT_VERSION}' WHERE key = 'format'",
)

_SCHEMA: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE snapshot (seq INTEGER PRIMARY KEY, token BLOB NOT NULL,"
    " doc BLOB NOT NULL, time REAL NOT NULL)",
    "CREATE TABLE log (seq INTEGER PRIMARY KEY, token BLOB NOT NULL, doc_update BLOB NOT NULL,"
    " agent TEXT, origin TEXT NOT NULL, time REAL NOT NULL, paths TEXT NOT NULL)",
    "CREATE INDEX log_token ON log (token)",
    "CREATE TABLE blame (path TEXT PRIMARY KEY, seq INTEGER NOT NULL, agent TEXT,"
    " time REAL NOT NULL, token BLOB NOT NULL)",
    "CREATE TABLE conflicts (id INTEGER PRIMARY KEY, time REAL NOT NULL, path TEXT NOT NULL,"
    " base TEXT NOT NULL, current TEXT NOT NULL, incoming TEXT NOT NULL, current_agent TEXT,"
    " incoming_agent TEXT, policy TEXT, resolution TEXT NOT NULL, applied INTEGER NOT NULL,"
    " token BLOB NOT NULL)",
    "CREATE INDEX conflicts_path ON conflicts (path)",
    "CREATE INDEX conflicts_time ON conflicts (time)",
    _REQUESTS_TABLE,
)
_IN_USE: Final = "the state file is open in another process or connection"
_TABLES: Final = frozenset({"meta", "snapshot", "log", "blame", "conflicts"})


# -- encodings ---------------------------------------------------------------------
def path_key(path: Path) -> str:
    """The stored form of a path: a compact ASCII JSON array."""
    return json.dumps(list(path), ensure_ascii=True, separators=(",", ":"))


def descendants_range(path: Path) -> tuple[str, str]:
    """``(low, high)``: the keys of the strict descendants of ``path`` are in ``[low, high)``."""
    low = path_key(path)[:-1] + ("," if path else "")
    return low, low + "\u0080"  # keys are ASCII: every descendant sorts below U+0080


def decode_path(key: str) -> Path:
    return tuple(json.loads(key))


def encode_value(value: Any) -> str:
    """JSON for an audit-log value; absent and unresolved get their own markers."""
    if value is MISSING:
        return '{"missing":true}'
    if value is UNRESOLVED:
        return '{"unresolved":true}'
    try:
        return json.dumps({"v": value}, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):  # a resolver returned something odd: keep its repr
        return json.dumps({"repr": repr(value)})


def decode_value(text: str) -> Any:
    """Inverse of :func:`encode_value` (a ``repr`` fallback comes back as that string)."""
    data = json.loads(text)
    if "v" in data:
        return data["v"]
    if data.get("missing"):
        return MISSING
    if data.get("unresolved"):
        return UNRESOLVED
    return data.get("repr")


# -- opening -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LogRow:
    """One stored change."""

    seq: int
    token: bytes
    update: bytes
    agent: str | None
    origin: str
    time: float
    paths: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class Stored:
    """What a state file holds: its snapshot and the changes after it."""

    snapshot_seq: int
    snapshot_token: bytes
    snapshot: bytes
    rows: list[LogRow]


def _refuse(message: str, file: str, exc: BaseException | None = None) -> StorageError:
    details: dict[str, Any] = {"file": file}
    if exc is not None:
        details["sqlite"] = str(exc)
    return StorageError(message, details=details)


def _is_busy(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED") or (
        "locked" in str(exc)
    )


def connect(
    path: str | os.PathLike[str], durability: Durability
) -> tuple[sqlite3.Connection, bool]:
    """Open and lock a state file; return ``(connection, is_new)``.

    A missing or empty file (or a SQLite file with no tables) is new; it is
    given its tables by :func:`create`. Anything else must carry our
    application id and a format version we know, and pass ``quick_check``;
    otherwise :class:`StorageError` is raised and the file is left untouched.
    A file held by another connection raises :class:`StorageError` at once.
    """
    file = os.fspath(path)
    if durability not in _SYNCHRONOUS:
        raise ValueError(f"durability must be 'full', 'normal' or 'off', not {durability!r}")
    try:
        with open(file, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        head = b""
    except OSError as exc:
        raise _refuse(f"cannot read the state file: {exc}", file, exc) from exc
    if head and head != _SQLITE_MAGIC:
        raise _refuse("not a crdt-state file (not even a SQLite database)", file)
    try:
        conn = sqlite3.connect(file, isolation_level=None, check_same_thread=False, timeout=0)
    except sqlite3.Error as exc:
        raise _refuse(f"cannot open the state file: {exc}", file, exc) from exc
    try:
        is_new = _prepare(conn, file)
        conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[durability]}")
    except BaseException:
        conn.close()
        raise
    return conn, is_new


def _prepare(conn: sqlite3.Connection, file: str) -> bool:
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as exc:
        if _is_busy(exc):
            raise _refuse(_IN_USE, file, exc) from exc
        raise _refuse(f"the state file is damaged or not a database: {exc}", file, exc) from exc
    is_new = app_id == 0 and not tables
    if not is_new:
        if app_id != APPLICATION_ID:
            raise _refuse("not a crdt-state file (foreign SQLite database)", file)
        if version > FORMAT_VERSION:
            raise _refuse(f"the state file has format {version}, newer than {FORMAT_VERSION}", file)
        if not tables >= _TABLES:
            raise _refuse("the state file is damaged: tables are missing", file)
    try:
        if is_new:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        # take the write lock now; in exclusive locking mode it is held until close
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("COMMIT")
        if str(mode).lower() != "wal":
            raise _refuse(f"cannot use WAL on the state file (journal mode {mode})", file)
        if not is_new:
            check = conn.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise _refuse(f"the state file is damaged: {check[:3]}", file)
        conn.execute("PRAGMA wal_autocheckpoint=256")
        conn.execute("PRAGMA journal_size_limit=1048576")
        if not is_new:
            conn.execute(_REQUESTS_TABLE)  # files written before request ids get the table
            if "requests" in tables or version < FORMAT_VERSION:
                with _transaction(conn):  # format 1: requests were keyed by id alone
                    if "requests" in tables:
                        for statement in _MIGRATE_REQUESTS[:2]:
                            conn.execute(statement)
                    for statement in _MIGRATE_REQUESTS[2:]:
                        conn.execute(statement)
    except sqlite3.Error as exc:
        if _is_busy(exc):
            raise _refuse(_IN_USE, file, exc) from exc
        raise _refuse(f"the state file is damaged: {exc}", file, exc) from exc
    return is_new


def create(
    conn: sqlite3.Connection,
    snapshot_seq: int,
    token: bytes,
    snapshot: bytes,
    blame: Iterable[tuple[Path, int, str | None, float, bytes]],
) -> None:
    """Give a new file its tables and first snapshot, in one transaction."""
    now = time.time()
    with _transaction(conn):
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={FORMAT_VERSION}")
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("format", str(FORMAT_VERSION)), ("created", repr(now))],
        )
        conn.execute(
            "INSERT INTO snapshot (seq, token, doc, time) VALUES (?, ?, ?, ?)",
            (snapshot_seq, token, zlib.compress(snapshot), now),
        )
        conn.executemany(
            "INSERT OR REPLACE INTO blame (path, seq, agent, time, token) VALUES (?, ?, ?, ?, ?)",
            [(path_key(p), seq, agent, when, tok) for p, seq, agent, when, tok in blame],
        )


class _transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


def transaction(conn: sqlite3.Connection) -> _transaction:
    """A write transaction as a context manager."""
    return _transaction(conn)


# -- reading -----------------------------------------------------------------------
def _log_row(row: Sequence[Any]) -> LogRow:
    return LogRow(
        seq=row[0],
        token=row[1],
        update=row[2],
        agent=row[3],
        origin=row[4],
        time=row[5],
        paths=tuple(tuple(p) for p in json.loads(row[6])),
    )


_LOG_COLUMNS: Final = "seq, token, doc_update, agent, origin, time, paths"


def load(conn: sqlite3.Connection, upto: int | None = None) -> Stored:
    """The snapshot and the log rows after it (up to seq ``upto`` when given), in order.

    Raises :class:`StorageError` if the snapshot is missing or the seqs have a gap.
    """
    snap = conn.execute("SELECT seq, token, doc FROM snapshot ORDER BY seq DESC LIMIT 1").fetchone()
    if snap is None:
        raise StorageError("the state file is damaged: it has no snapshot")
    limit = upto if upto is not None else -1
    rows = [
        _log_row(r)
        for r in conn.execute(
            f"SELECT {_LOG_COLUMNS} FROM log WHERE seq > ? AND (? < 0 OR seq <= ?) ORDER BY seq",
            (snap[0], limit, limit),
        )
    ]
    for expected, row in enumerate(rows, start=snap[0] + 1):
        if row.seq != expected:
            raise StorageError(
                "the state file is damaged: the change log has a gap",
                details={"expected_seq": expected, "found_seq": row.seq},
            )
    try:
        snapshot = zlib.decompress(snap[2])
    except (zlib.error, TypeError) as exc:
        raise StorageError(
            f"the state file is damaged: the snapshot does not decompress ({exc})"
        ) from exc
    return Stored(snapshot_seq=snap[0], snapshot_token=snap[1], snapshot=snapshot, rows=rows)


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
) -> list[LogRow]:
    """Stored changes, oldest first, filtered by agent and time."""
    clauses: list[str] = []
    params: list[Any] = []
    if agent is not None:
        clauses.append("agent = ?")
        params.append(agent)
    if since is not None:
        clauses.append("time >= ?")
        params.append(since)
    if until is not None:
        clauses.append("time <= ?")
        params.append(until)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    cursor = conn.execute(f"SELECT {_LOG_COLUMNS} FROM log{where} ORDER BY seq", params)
    return [_log_row(r) for r in cursor]


BlameRow = tuple[Path, int, str | None, float, bytes]


def blame_row(conn: sqlite3.Connection, path: Path) -> BlameRow | None:
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
    return decode_path(found[0]), found[1], found[2], found[3], found[4]


def conflict_rows(
    conn: sqlite3.Connection, path: Path | None, since: float | None
) -> list[tuple[Any, ...]]:
    """Audit-log rows, oldest first, at or below ``path``, from time ``since``."""
    clauses: list[str] = []
    params: list[Any] = []
    if path is not None:
        low, high = descendants_range(path)
        clauses.append("(path = ? OR (path >= ? AND path < ?))")
        params.extend([path_key(path), low, high])
    if since is not None:
        clauses.append("time >= ?")
        params.append(since)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    return list(
        conn.execute(
            "SELECT path, base, current, incoming, current_agent, incoming_agent, policy,"
            f" resolution, applied, token, time FROM conflicts{where} ORDER BY id",
            params,
        )
    )


def count_log(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM log").fetchone()[0])


# -- writing -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChangeRow:
    """One change to append to the log (see :func:`append_changes`)."""

    seq: int
    token: bytes
    update: bytes
    agent: str | None
    origin: str
    time: float
    paths: tuple[Path, ...]
    request_id: int | None = None
    writer: str | None = None
    clean: bool = True


def append_changes(conn: sqlite3.Connection, rows: Sequence[ChangeRow]) -> None:
    """Append changes (oldest first) with their blame and request ids: a few statements for all."""
    if not rows:
        return
    conn.executemany(
        f"INSERT INTO log ({_LOG_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(r.seq, r.token, r.update, r.agent, r.origin, r.time, _paths_json(r.paths)) for r in rows],
    )
    conn.executemany(
        "INSERT OR REPLACE INTO blame (path, seq, agent, time, token) VALUES (?, ?, ?, ?, ?)",
        [(path_key(p), r.seq, r.agent, r.time, r.token) for r in rows for p in r.paths],
    )
    requests = [r for r in rows if r.request_id is not None]
    if requests:
        conn.executemany(
            "INSERT OR REPLACE INTO writer_requests (writer, id, seq, token, paths, clean)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [
                (r.writer or "", r.request_id, r.seq, r.token, _paths_json(r.paths), int(r.clean))
                for r in requests
            ],
        )


def remember_request(
    conn: sqlite3.Connection, writer: str, request_id: int, seq: int, token: bytes, clean: bool
) -> None:
    """Store an applied request that wrote nothing (it has no change row)."""
    conn.execute(
        "INSERT OR REPLACE INTO writer_requests (writer, id, seq, token, paths, clean)"
        " VALUES (?, ?, ?, ?, '[]', ?)",
        (writer, request_id, seq, token, int(clean)),
    )


def _paths_json(paths: Sequence[Path]) -> str:
    return json.dumps([list(p) for p in paths])


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One remembered request (see :func:`recent_requests`)."""

    writer: str
    request_id: int
    seq: int
    token: bytes
    paths: tuple[Path, ...]
    clean: bool


def recent_requests(conn: sqlite3.Connection) -> list[RequestRow]:
    """The newest :data:`KEEP_REQUESTS` remembered requests, oldest first."""
    rows = conn.execute(
        "SELECT writer, id, seq, token, paths, clean FROM writer_requests"
        " ORDER BY rowid DESC LIMIT ?",
        (KEEP_REQUESTS,),
    ).fetchall()
    return [
        RequestRow(
            str(writer),
            int(rid),
            int(seq),
            bytes(token),
            tuple(tuple(p) for p in json.loads(paths)),
            bool(clean),
        )
        for writer, rid, seq, token, paths, clean in reversed(rows)
    ]


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
    conn.executemany(
        "INSERT INTO conflicts (time, path, base, current, incoming, current_agent,"
        " incoming_agent, policy, resolution, applied, token)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                when,
                path_key(c.path),
                encode_value(c.base),
                encode_value(c.current),
                encode_value(c.incoming),
                c.current_agent,
                c.incoming_agent,
                c.policy,
                encode_value(c.resolution),
                int(applied),
                token,
            )
            for c in conflicts
        ],
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
    with _transaction(conn):
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
    return [decode_path(r[0]) for r in cursor]


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the database file and truncate it."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
