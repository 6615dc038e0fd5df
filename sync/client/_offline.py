"""The client's local file: its writer identity, its replica of the room, its queued merges.

A small SQLite database (standard ``sqlite3``) so that an agent that loses
the hub, or restarts, keeps what it knew and what it still has to send.
Merges are written before they are sent, and removed once the hub answered.
The writer identity (see :meth:`OfflineStore.writer`) is created once per
file, so a merge re-sent after a restart is still recognised by the hub.

A file serves one client at a time and one room: the store holds the file's lock
(:mod:`sync.client._local_lock`) from opening to :meth:`OfflineStore.close`, and the
file records the room of its first client (``meta`` key ``room``; a file written
before rooms were recorded is given the room of its next client). Opening a file
another client holds, or one of another room, is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crdt_state import MISSING, Change, VersionVector
from sync.client._local_lock import take
from sync.wire.changes import ChangeKind, WireChange, decode_change_set, encode_change_set
from sync.wire.convert import core_changes, wire_changes
from sync.wire.errors import LocalFileError, LocalFileWrongRoom
from sync.wire.runs import from_runs, to_runs

__all__ = ["OfflineStore", "PendingMerge"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replica (id INTEGER PRIMARY KEY AUTOINCREMENT, update_ BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS pending (
    request_id INTEGER PRIMARY KEY,
    ord INTEGER NOT NULL,
    agent TEXT NOT NULL,
    base BLOB NOT NULL,
    ops BLOB NOT NULL
);
"""
# columns added after the first version of the file (added to older files on open)
_PENDING_COLUMNS = {
    "chain": "ALTER TABLE pending ADD COLUMN chain TEXT NOT NULL DEFAULT '[]'",
    "seen": "ALTER TABLE pending ADD COLUMN seen BLOB",
    "confirmed": "ALTER TABLE pending ADD COLUMN confirmed BLOB",
}


@dataclass(frozen=True)
class PendingMerge:
    """A merge not yet acknowledged by the hub.

    ``order`` is the place of the merge among this agent's merges (a merge sent
    again after its conflicts were settled keeps the place of the one it
    replaces). ``chain`` lists, in increasing order, the request ids of earlier
    merges of this writer that the agent's view held when the changes were
    computed (its unconfirmed merges then); ``seen`` then holds, for every
    path the merge sets or deletes, the value the agent saw there before its
    own write (:data:`~crdt_state.MISSING` when absent), so the client can judge
    the merge itself if the hub cannot take the chain.
    """

    request_id: int
    order: int
    agent: str
    base: VersionVector
    ops: list[Change]
    chain: tuple[int, ...] = ()
    seen: dict[tuple[str, ...], Any] | None = None


def _dump_seen(seen: dict[tuple[str, ...], Any] | None) -> bytes | None:
    """``seen`` as a wire change set: ``set`` for a value, ``delete`` for an absent one."""
    if seen is None:
        return None
    return encode_change_set(
        [
            WireChange(ChangeKind.DELETE, path)
            if value is MISSING
            else WireChange(ChangeKind.SET, path, value)
            for path, value in seen.items()
        ]
    )


def _load_seen(data: bytes | None) -> dict[tuple[str, ...], Any] | None:
    if data is None:
        return None
    return {
        tuple(r.path): MISSING if r.kind is ChangeKind.DELETE else r.value
        for r in decode_change_set(bytes(data))
    }


class OfflineStore:
    """The local SQLite file of one remote agent, held by it until :meth:`close`.

    Args:
        path: the file (created when missing).
        room: the room of the client (its URL path, without the first ``/``).

    Raises:
        LocalFileInUse: another client, of this process or another, holds the file.
        LocalFileWrongRoom: the file belongs to another room.
        LocalFileError: the file cannot be created or opened (a missing directory, not
            a SQLite file).

    When it raises, the file is as it was and not held.
    """

    def __init__(self, path: str | Path, *, room: str) -> None:
        self.path = Path(path)
        self.room = room
        self._lock = threading.Lock()
        try:
            with contextlib.ExitStack() as undo:  # a refusal leaves the file closed and free
                self._file_lock = take(path)
                undo.callback(self._file_lock.release)
                self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                undo.callback(self._db.close)
                self._check_room(str(path))
                self._open()
                undo.pop_all()
        except (OSError, sqlite3.Error) as exc:  # a missing directory, not a SQLite file
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise LocalFileError(
                str(path),
                f"the local file {str(path)!r} cannot be used: {reason} (give connect() "
                "local= a file of its own in a directory that exists)",
            ) from exc

    def _check_room(self, shown: str) -> None:
        """Refuse a file that belongs to another room (read only: nothing is written)."""
        has_meta = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if has_meta is None:
            return
        row = self._db.execute("SELECT value FROM meta WHERE key = 'room'").fetchone()
        if row is not None and row[0] != self.room:
            raise LocalFileWrongRoom(shown, self.room, str(row[0]))

    def _open(self) -> None:
        """Set the file up (new tables and columns) and record its room when it has none."""
        self._db.execute("PRAGMA journal_mode=WAL")
        # survives a crash of the process (what an offline agent needs) without an
        # fsync per merge on the event loop; a power loss may drop the last writes
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(pending)")}
        for name, statement in _PENDING_COLUMNS.items():
            if name not in columns:
                self._db.execute(statement)
        self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('room', ?)", (self.room,))
        self._replica_rows = self._db.execute("SELECT count(*) FROM replica").fetchone()[0]

    def next_request_id(self) -> int:
        """The lowest request id never written to this file (1 for a new file)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'next_request'").fetchone()
            return int(row[0]) if row is not None else 1

    def writer(self) -> str:
        """This file's writer identity: 128 random bits (hex), created on first use."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('writer', ?)",
                (secrets.token_hex(16),),
            )
            row = self._db.execute("SELECT value FROM meta WHERE key = 'writer'").fetchone()
            return str(row[0])

    def load_replica(self) -> list[bytes]:
        with self._lock:
            return [
                bytes(r[0]) for r in self._db.execute("SELECT update_ FROM replica ORDER BY id")
            ]

    def append_replica(self, update: bytes) -> int:
        """Store one update of the replica; returns how many are stored since the last save."""
        with self._lock:
            self._db.execute("INSERT INTO replica (update_) VALUES (?)", (update,))
            self._replica_rows += 1
            return int(self._replica_rows)

    def save_replica(self, full: bytes) -> None:
        """Replace the stored replica by one full update (never by nothing)."""
        if not full:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM replica")
            self._replica_rows = 1
            self._db.execute("INSERT INTO replica (update_) VALUES (?)", (full,))
            self._db.execute("COMMIT")

    def load_pending(self) -> list[PendingMerge]:
        """The queued merges, in ``order``.

        Change sets written by earlier versions may carry their ``combine``
        flags; they are read and ignored.
        """
        return [merge for merge, token in self._load() if token is None]

    def load_confirmed(self) -> list[tuple[VersionVector, PendingMerge]]:
        """Merges the hub applied whose update the replica may not hold yet, with their token."""
        return [(token, merge) for merge, token in self._load() if token is not None]

    def _load(self) -> list[tuple[PendingMerge, VersionVector | None]]:
        with self._lock:
            rows = list(
                self._db.execute(
                    "SELECT request_id, ord, agent, base, ops, chain, seen, confirmed"
                    " FROM pending ORDER BY ord, rowid"
                )
            )
        return [
            (
                PendingMerge(
                    rid,
                    order,
                    agent,
                    VersionVector.from_state(bytes(base), strict=True),
                    core_changes(decode_change_set(bytes(ops))),
                    from_runs(json.loads(chain)),
                    _load_seen(seen),
                ),
                None
                if confirmed is None
                else VersionVector.from_state(bytes(confirmed), strict=True),
            )
            for rid, order, agent, base, ops, chain, seen, confirmed in rows
        ]

    def confirm_pending(self, request_id: int, token: VersionVector) -> None:
        """Mark a merge applied by the hub at ``token``; kept until the replica holds it."""
        with self._lock:
            self._db.execute(
                "UPDATE pending SET confirmed = ? WHERE request_id = ?",
                (token.to_state(), request_id),
            )

    def add_pending(self, pending: PendingMerge) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._insert(pending)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def replace_pending(self, old_request_id: int, pending: PendingMerge) -> None:
        """Put ``pending`` in the place of the merge ``old_request_id`` (one transaction)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM pending WHERE request_id = ?", (old_request_id,))
                self._insert(pending)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _insert(self, pending: PendingMerge) -> None:
        # request ids are drawn in order; the next one is never reused, even after a crash
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES ('next_request', ?) ON CONFLICT (key)"
            " DO UPDATE SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
            (str(pending.request_id + 1),),
        )
        self._db.execute(
            "INSERT OR REPLACE INTO pending (request_id, ord, agent, base, ops, chain, seen)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                pending.request_id,
                pending.order,
                pending.agent,
                pending.base.to_state(),
                encode_change_set(wire_changes(pending.ops)),
                json.dumps(to_runs(pending.chain)),
                _dump_seen(pending.seen),
            ),
        )

    def remove_pending(self, request_id: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM pending WHERE request_id = ?", (request_id,))

    def close(self) -> None:
        """Close the file and release it for the next client (idempotent)."""
        with self._lock:
            self._db.close()
            self._file_lock.release()
