"""The client's local file: its replica of the room and its queued merges.

A small SQLite database (standard ``sqlite3``) so that an agent that loses
the hub, or restarts, keeps what it knew and what it still has to send.
Merges are written before they are sent, and removed once the hub answered.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from crdt_state import Change, VersionVector

from .changes import decode_change_set, encode_change_set
from .wire import core_changes, wire_changes

__all__ = ["OfflineStore", "PendingMerge"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replica (id INTEGER PRIMARY KEY AUTOINCREMENT, update_ BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS pending (
    request_id INTEGER PRIMARY KEY,
    ord INTEGER NOT NULL,
    agent TEXT NOT NULL,
    base BLOB NOT NULL,
    ops BLOB NOT NULL
);
"""


@dataclass(frozen=True)
class PendingMerge:
    """A merge not yet acknowledged by the hub, in submission ``order``."""

    request_id: int
    order: int
    agent: str
    base: VersionVector
    ops: list[Change]
    combine: frozenset[tuple[str, ...]] = frozenset()
    """Paths whose equal concurrent writes the client's policies combine."""


def _dump_ops(pending: PendingMerge) -> bytes:
    """The change set as the merge message carries it (``combine`` flags included)."""
    return encode_change_set(wire_changes(pending.ops, pending.combine.__contains__))


def _load_ops(data: bytes) -> tuple[list[Change], frozenset[tuple[str, ...]]]:
    records = decode_change_set(bytes(data))
    return core_changes(records), frozenset(tuple(r.path) for r in records if r.combine)


class OfflineStore:
    """The local SQLite file of one remote agent process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        # survives a crash of the process (what an offline agent needs) without an
        # fsync per merge on the event loop; a power loss may drop the last writes
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._replica_rows = self._db.execute("SELECT count(*) FROM replica").fetchone()[0]

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
        with self._lock:
            rows = list(
                self._db.execute(
                    "SELECT request_id, ord, agent, base, ops FROM pending ORDER BY ord"
                )
            )
        out = []
        for rid, order, agent, base, text in rows:
            ops, combine = _load_ops(text)
            out.append(
                PendingMerge(rid, order, agent, VersionVector.from_state(bytes(base)), ops, combine)
            )
        return out

    def add_pending(self, pending: PendingMerge) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?)",
                (
                    pending.request_id,
                    pending.order,
                    pending.agent,
                    pending.base.to_state(),
                    _dump_ops(pending),
                ),
            )

    def remove_pending(self, request_id: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM pending WHERE request_id = ?", (request_id,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
