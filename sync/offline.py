"""The client's local file: its replica of the room and its queued merges.

A small SQLite database (standard ``sqlite3``) so that an agent that loses
the hub, or restarts, keeps what it knew and what it still has to send.
Merges are written before they are sent, and removed once the hub answered.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crdt_state import MISSING, Change, VersionVector

__all__ = ["OfflineStore", "PendingMerge"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replica (id INTEGER PRIMARY KEY AUTOINCREMENT, update_ BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS pending (
    request_id INTEGER PRIMARY KEY,
    ord INTEGER NOT NULL,
    agent TEXT NOT NULL,
    base BLOB NOT NULL,
    ops TEXT NOT NULL
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


def _dump_ops(pending: PendingMerge) -> str:
    return json.dumps(
        [
            {"kind": op.kind, "path": list(op.path)}
            | ({} if op.value is MISSING else {"value": op.value})
            | ({"combine": True} if op.path in pending.combine else {})
            for op in pending.ops
        ]
    )


def _load_ops(text: str) -> tuple[list[Change], frozenset[tuple[str, ...]]]:
    out: list[Change] = []
    combine: set[tuple[str, ...]] = set()
    for item in json.loads(text):
        value: Any = item.get("value", MISSING)
        out.append(Change(item["kind"], tuple(item["path"]), value))
        if item.get("combine"):
            combine.add(tuple(item["path"]))
    return out, frozenset(combine)


class OfflineStore:
    """The local SQLite file of one remote agent process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def load_replica(self) -> list[bytes]:
        with self._lock:
            return [
                bytes(r[0]) for r in self._db.execute("SELECT update_ FROM replica ORDER BY id")
            ]

    def append_replica(self, update: bytes) -> None:
        with self._lock:
            self._db.execute("INSERT INTO replica (update_) VALUES (?)", (update,))

    def save_replica(self, full: bytes) -> None:
        """Replace the stored replica by one full update (never by nothing)."""
        if not full:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM replica")
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
