"""What the PostgreSQL store reads back (history, versions, blame, audit log), and compaction.

The same answers as the SQLite store (:mod:`crdt_state._sqlite_reads`, whose
replay and tombstone measure are reused), for one ``key``. No threads: the
caller holds the connection's lock; each query runs in one transaction, so a
reader sees one consistent version even while the owner compacts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from . import _fold
from . import _pg_log as pglog
from . import _sqlite_reads as common
from ._document import doc_read, doc_snapshot
from ._history_query import HistoryQuery, missing_version
from ._pg_connect import failures
from .journal import BlameEntry, ConflictRecord, HistoryEntry
from .paths import Path
from .values import MISSING
from .version import VersionVector

if TYPE_CHECKING:
    import psycopg

__all__ = ["PgReads", "compact"]


class PgReads:
    """The history queries of one key (the store flushes its own writes before each)."""

    def __init__(
        self, conn: psycopg.Connection[Any], key: str, db: threading.Lock, where: str
    ) -> None:
        self._conn = conn
        self._key = key
        self._db = db
        self._where = where

    @contextlib.contextmanager
    def _read(self) -> Iterator[None]:
        """The connection's lock, one transaction, psycopg errors as :class:`StorageError`."""
        failing = failures("cannot read the stored state", self._where)
        with self._db, failing, self._conn.transaction():
            yield

    def history(self, query: HistoryQuery) -> list[HistoryEntry]:
        """Retained changes, oldest first, that ``query`` wants."""
        with self._read():
            rows = pglog.history_rows(self._conn, self._key, query.agent, query.since, query.until)
        return query.pick(rows)

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The content when the state had exactly ``token`` (see :meth:`PostgresStore.at`)."""
        with self._read():
            seq = pglog.seq_of_token(self._conn, self._key, token.to_state())
            if seq is None:
                oldest = pglog.load(self._conn, self._key, upto=0).snapshot_token
            else:
                stored = pglog.load(self._conn, self._key, upto=seq)
        if seq is None:
            raise missing_version(token, oldest)
        return doc_snapshot(common.replay(stored))

    def blame(self, path: Path) -> BlameEntry | None:
        """The newest change that wrote ``path``, an ancestor or a descendant."""
        with self._read():
            return pglog.blame_row(self._conn, self._key, path)

    def conflicts(self, path: Path | None, since: float | None) -> list[ConflictRecord]:
        """Audited conflicts, oldest first, at or below ``path``, from time ``since``."""
        with self._read():
            return pglog.conflict_rows(self._conn, self._key, path, since)


def compact(
    conn: psycopg.Connection[Any],
    key: str,
    fold: int,
    keep_conflicts: int | None,
    before_commit: Callable[[psycopg.Connection[Any]], None],
    *,
    measure: bool = True,
    on_change: Callable[[], None] | None = None,
) -> bool | None:
    """Fold the log rows of ``key`` up to seq ``fold`` into a new snapshot (one transaction).

    As :func:`crdt_state._sqlite_reads.compact`: the old snapshot and those rows'
    updates are replayed (:func:`crdt_state._fold.fold`), the new snapshot must give
    the last row's token and decode to the same content; only then are it inserted
    and the folded rows deleted.
    ``before_commit(conn)`` runs last inside the transaction (the store's hook).

    Returns:
        ``None`` when there was nothing to fold; else whether a new epoch is due
        (the document is dominated by tombstones; only measured with ``measure``).

    Raises:
        StorageError: a check failed (nothing changed).
    """
    with conn.transaction():
        rows = pglog.fold_input(conn, key, fold)
        if rows is None:
            return None
        folded = _fold.fold(
            rows, on_change, precise=lambda: common.replay(pglog.load(conn, key, upto=fold))
        )
        written = pglog.blame_paths_upto(conn, key, fold)
        gone = [p for p in written if doc_read(folded.doc, p) is MISSING]
        encoded = folded.encoded
        pglog.swap_snapshot(conn, key, fold, rows.token.to_state(), encoded, gone, keep_conflicts)
        before_commit(conn)
    return measure and common.tombstones_dominate(encoded, folded.content)
