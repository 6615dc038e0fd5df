"""The SQLite file format of durable states: opening, checking, migrating, creating.

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
                                       version after the change (no index: the
                                       rows' tokens are spread over its pages, a
                                       commit rewrote most of them; ``at`` scans
                                       the log it then replays anyway)
    blame      (path, seq, agent, time, token)
                                       the last change that wrote each path
                                       (``WITHOUT ROWID``: one b-tree keyed by path)
    conflicts  (id, time, path, base, current, incoming, current_agent,
                incoming_agent, policy, resolution, applied, token)
                                       the conflict audit log
    writer_requests (writer, id, seq, token, paths, clean)
                                       the newest applied requests (see
                                       ``crdt_state.requests``), in the order they
                                       were applied (rowid), with no index: each
                                       commit appends to one page; ``seq`` is the
                                       change they made (the head seq, and ``paths``
                                       ``[]``, when they wrote nothing); ``clean``:
                                       applied without conflict

Deduplication of requests is the in-memory ``RequestMemory``'s: a request is stored
once when applied, and a key stored twice (applied again after the memory forgot
it) has two rows, of which the newer wins when the memory is loaded back.

Files of older formats are upgraded when opened for writing
(:mod:`crdt_state._sqlite_upgrade`); :func:`connect_read_only` reads formats 2 and 3.

Paths are stored as ASCII JSON arrays (``["customer","tier"]``), so the
descendants of a path are one key range. Values in the audit log are JSON
wrapped so that "absent" and "unresolved" stay distinct from any data.

This module opens, checks, migrates and creates the file;
:mod:`crdt_state._sqlite_log` reads and writes its rows. Neither knows pycrdt or threads.
The writer returned by :func:`connect` holds the file's writer lock
(:mod:`crdt_state._file_lock`: an ``flock``, taken before SQLite opens the file) until
:func:`release`: a second writer, from this process or another, is refused with
:class:`StorageError` (after retrying for up to 1.5 s, naming the holder's pid when the
system tells). SQLite itself runs in its normal locking mode (WAL,
shared memory index), so readers opened by :func:`connect_read_only` (``mode=ro``, no
lock) read the committed state while the writer works, and never write the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import zlib
from collections.abc import Iterable
from typing import Any, Final, Literal, NamedTuple
from urllib.parse import quote

from . import _file_lock
from ._file_errors import failure, in_this_process, in_use, is_busy, os_failure, refuse
from ._kept import kept_encoding
from ._sqlite_upgrade import BLAME_TABLE, REQUESTS_TABLE, upgrade
from .conflicts import UNRESOLVED
from .paths import Path
from .values import MISSING

__all__ = [
    "APPLICATION_ID",
    "FORMAT_VERSION",
    "Durability",
    "Writer",
    "connect",
    "connect_read_only",
    "create",
    "descendants_range",
    "encode_value",
    "in_this_process",
    "path_key",
    "release",
    "transaction",
]

APPLICATION_ID: Final = 0x63727374  # "crst"
FORMAT_VERSION: Final = 3
READ_FORMATS: Final = range(2, FORMAT_VERSION + 1)
"""The formats :func:`connect_read_only` reads (their queries are the same)."""
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"

Durability = Literal["full", "normal", "off"]
_SYNCHRONOUS: Final[dict[str, str]] = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}

_SCHEMA: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE snapshot (seq INTEGER PRIMARY KEY, token BLOB NOT NULL,"
    " doc BLOB NOT NULL, time REAL NOT NULL)",
    "CREATE TABLE log (seq INTEGER PRIMARY KEY, token BLOB NOT NULL, doc_update BLOB NOT NULL,"
    " agent TEXT, origin TEXT NOT NULL, time REAL NOT NULL, paths TEXT NOT NULL)",
    BLAME_TABLE,
    "CREATE TABLE conflicts (id INTEGER PRIMARY KEY, time REAL NOT NULL, path TEXT NOT NULL,"
    " base TEXT NOT NULL, current TEXT NOT NULL, incoming TEXT NOT NULL, current_agent TEXT,"
    " incoming_agent TEXT, policy TEXT, resolution TEXT NOT NULL, applied INTEGER NOT NULL,"
    " token BLOB NOT NULL)",
    "CREATE INDEX conflicts_path ON conflicts (path)",
    "CREATE INDEX conflicts_time ON conflicts (time)",
    REQUESTS_TABLE,
)
BUSY_WAIT_MS: Final = 5_000
"""How long a statement waits for SQLite's own brief locks (a reader recovering the WAL
index, a checkpoint) before it fails."""
_DROPPED_INDEX: Final = "log_token"
"""An index of ``log (token)`` that files kept until the writer threads' rows were
measured: dropped when such a file is opened for writing (~4 µs a hub merge)."""
_TABLES: Final = frozenset({"meta", "snapshot", "log", "blame", "conflicts"})


# -- encodings ---------------------------------------------------------------------
_KEY_ENCODER: Final = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))
_encoded_keys: dict[Any, str] = {}


def _encode_key(path: Path) -> str:
    return _KEY_ENCODER.encode(list(path))


def path_key(path: Path) -> str:
    """The stored form of a path: a compact ASCII JSON array (kept once encoded)."""
    return kept_encoding(_encoded_keys, path, _encode_key)


def descendants_range(path: Path) -> tuple[str, str]:
    """``(low, high)``: the keys of the strict descendants of ``path`` are in ``[low, high)``."""
    low = path_key(path)[:-1] + ("," if path else "")
    return low, low + "\u0080"  # keys are ASCII: every descendant sorts below U+0080


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


class Writer(NamedTuple):
    """A state file opened for writing: the connection, whether it is new, the lock."""

    conn: sqlite3.Connection
    is_new: bool
    lock: int
    """The descriptor holding the writer lock (closed by :func:`release`)."""


def release(writer: Writer) -> None:
    """Close the connection, then drop the writer lock (in that order)."""
    try:
        writer.conn.close()
    finally:
        _file_lock.drop(writer.lock)


def connect(path: str | os.PathLike[str], durability: Durability) -> Writer:
    """Open and lock a state file for writing.

    A missing or empty file (or a SQLite file with no tables) is new; it is
    given its tables by :func:`create`. Anything else must carry our
    application id and a format version we know, and pass ``quick_check``;
    otherwise :class:`StorageError` is raised and the file is left untouched.
    A file held by another connection is retried with backoff for up to
    :data:`~crdt_state._file_lock.OPEN_WAIT` seconds (two processes opening it at
    the same moment), then raises :class:`StorageError` with ``details["reason"]``
    ``"open_in_another_process"`` and ``details["pid"]`` when known.
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
        raise os_failure("cannot read the state file", file, exc) from exc
    if head and head != _SQLITE_MAGIC:
        raise refuse("not a crdt-state file (not even a SQLite database)", file)
    return _file_lock.retry_while_in_use(file, lambda: _connect_once(file, durability))


def _connect_once(file: str, durability: Durability) -> Writer:
    lock = _file_lock.take(file)
    try:
        conn = sqlite3.connect(file, isolation_level=None, check_same_thread=False, timeout=0)
    except sqlite3.Error as exc:
        error = failure("cannot open the state file", file, exc)  # while the lock holds its fd
        _file_lock.drop(lock)
        raise error from exc
    try:
        is_new = _prepare(conn, file)
        conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[durability]}")
        conn.execute(f"PRAGMA busy_timeout={BUSY_WAIT_MS}")  # readers' brief WAL-index locks
    except BaseException:
        release(Writer(conn, False, lock))
        raise
    return Writer(conn, is_new, lock)


def connect_read_only(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open a state file to read it only, even while a writer (a hub) holds it.

    No lock is taken and nothing is ever written to the file: SQLite opens it with
    ``mode=ro`` and reads the committed state through the WAL, as any WAL reader
    does (SQLite may create the empty ``-wal``/``-shm`` companions when no writer
    left them). A file of format 1 is refused (opening it once for writing
    upgrades it).

    Raises:
        StorageError: no file (``details["reason"]`` ``"missing"``), not a state file
            (``"not_a_state_file"``), damaged, newer, or of format 1 (``"old_format"``);
            the file is untouched.
    """
    file = os.fspath(path)
    if not os.path.isfile(file):
        error = refuse("there is no state file here", file)
        error.details["reason"] = "missing"
        raise error
    uri = "file:" + quote(os.path.abspath(file)) + "?mode=ro"
    if _frozen(file):  # SQLite cannot make the -shm a WAL reader needs: read it as it is
        uri += "&immutable=1"
    try:
        conn = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=BUSY_WAIT_MS / 1e3
        )
    except sqlite3.Error as exc:
        raise failure("cannot open the state file", file, exc) from exc
    try:
        _check_readable(conn, file)
    except BaseException:
        conn.close()
        raise
    return conn


def _frozen(file: str) -> bool:
    """True when no one writes ``file``: a directory read-only to us, no ``-wal`` content.

    (Opened ``immutable``, SQLite needs no ``-shm``, which it cannot create there.)
    """
    folder = os.path.dirname(os.path.abspath(file))
    if os.access(folder, os.W_OK):
        return False
    try:
        return os.path.getsize(file + "-wal") == 0
    except OSError:
        return True  # no -wal at all


def _header(conn: sqlite3.Connection, file: str) -> tuple[int, int, set[str]]:
    """The file's application id, format and table names.

    Raises:
        StorageError: a damaged schema (a table name that is not text).
        sqlite3.Error: SQLite could not read them (not a database, busy...).
    """
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except UnicodeDecodeError as exc:
        raise refuse(f"the state file is damaged: {exc}", file) from exc
    return app_id, version, tables


def _check_readable(conn: sqlite3.Connection, file: str) -> None:
    """Refuse, without writing, what a read-only connection cannot read as a state."""
    try:
        app_id, version, tables = _header(conn, file)
    except sqlite3.Error as exc:
        error = failure("not a crdt-state file (or a damaged one)", file, exc)
        error.details.setdefault("reason", "not_a_state_file")
        raise error from exc
    if app_id != APPLICATION_ID:
        error = refuse("not a crdt-state file", file)
        error.details["reason"] = "not_a_state_file"
        raise error
    if version > FORMAT_VERSION:
        raise refuse(f"the state file has format {version}, newer than {FORMAT_VERSION}", file)
    if not tables >= _TABLES:
        raise refuse("the state file is damaged: tables are missing", file)
    if version not in READ_FORMATS or "writer_requests" not in tables:
        error = refuse(
            f"the state file has the old format {version}: open it once for writing to upgrade it",
            file,
        )
        error.details["reason"] = "old_format"
        raise error


def _prepare(conn: sqlite3.Connection, file: str) -> bool:
    try:
        app_id, version, tables = _header(conn, file)
    except sqlite3.Error as exc:
        if is_busy(exc):
            raise in_use(file, exc) from exc
        raise failure("the state file is damaged or not a database", file, exc) from exc
    is_new = app_id == 0 and not tables
    if not is_new:
        if app_id != APPLICATION_ID:
            raise refuse("not a crdt-state file (foreign SQLite database)", file)
        if version > FORMAT_VERSION:
            raise refuse(f"the state file has format {version}, newer than {FORMAT_VERSION}", file)
        if not tables >= _TABLES:
            raise refuse("the state file is damaged: tables are missing", file)
    try:
        if is_new:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        # a writer of an older version holds SQLite's exclusive lock: find out now
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("COMMIT")
        if str(mode).lower() != "wal":
            raise refuse(f"cannot use WAL on the state file (journal mode {mode})", file)
        if not is_new:
            check = conn.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise refuse(f"the state file is damaged: {check[:3]}", file)
        if not is_new:  # files of crdt-state 0.1 kept an index of log tokens
            conn.execute(f"DROP INDEX IF EXISTS {_DROPPED_INDEX}")
        conn.execute("PRAGMA wal_autocheckpoint=256")
        conn.execute("PRAGMA journal_size_limit=1048576")
        if not is_new and (version < FORMAT_VERSION or "writer_requests" not in tables):
            with _transaction(conn):
                for statement in upgrade(version, tables, FORMAT_VERSION):
                    conn.execute(statement)
            conn.executescript("PRAGMA incremental_vacuum;")  # the old tables' pages
    except sqlite3.Error as exc:
        if is_busy(exc):
            raise in_use(file, exc) from exc
        raise failure("the state file is damaged", file, exc) from exc
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
