"""What the SQLite store reads back: history, versions, blame, the audit log; compaction.

Pure functions of the file plus pycrdt (to replay stored updates); no
threads: the caller holds the connection's lock (``db``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

from . import _fold
from . import _sqlite_log as sqllog
from ._document import doc_from_content, doc_read, doc_snapshot
from ._fold import replay
from ._history_query import HistoryQuery, missing_version
from .errors import StorageError
from .journal import BlameEntry, ConflictRecord, HistoryEntry
from .paths import Path
from .values import MISSING
from .version import VersionVector

__all__ = ["SqliteReads", "compact", "replay", "tombstones_dominate"]

_TOMBSTONE_FACTOR: Final = 4
_TOMBSTONE_SLACK: Final = 64 * 1024


class SqliteReads:
    """The history queries of one state file (the store flushes before each).

    With ``snapshots`` (a read-only store, while another process may write the file)
    each query runs in one read transaction: it sees one committed version.
    """

    def __init__(
        self, conn: sqlite3.Connection, db: threading.Lock, file: str = "", snapshots: bool = False
    ) -> None:
        self._conn = conn
        self._db = db
        self._file = file
        self._snapshots = snapshots

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction around the block (with ``snapshots``; else nothing)."""
        if not self._snapshots:
            yield
            return
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("COMMIT")  # a read transaction: nothing to commit

    @contextlib.contextmanager
    def _reading(self, locked: bool = True) -> Iterator[None]:
        """Hold the connection's lock; damage becomes a :class:`StorageError` naming the file."""
        held = contextlib.ExitStack()
        if locked:
            held.enter_context(self._db)
            held.enter_context(self.snapshot())
        with held:
            try:
                yield
            except StorageError as exc:
                exc.details.setdefault("file", self._file)
                raise
            except sqlite3.Error as exc:
                raise StorageError(
                    f"the state file is damaged: reading it failed ({exc})",
                    details={"file": self._file, "sqlite": str(exc)},
                ) from exc

    def history(self, query: HistoryQuery) -> list[HistoryEntry]:
        """Retained changes, oldest first, that ``query`` wants."""
        with self._reading():
            rows = sqllog.history_rows(self._conn, query.agent, query.since, query.until)
        return query.pick(rows)

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The content when the state had exactly ``token`` (see :meth:`SqliteStore.at`)."""
        with self._reading():
            seq = sqllog.seq_of_token(self._conn, token.to_state())
            if seq is None:
                oldest = sqllog.load(self._conn, upto=0).snapshot_token
            else:
                stored = sqllog.load(self._conn, upto=seq)
        if seq is None:
            raise missing_version(token, oldest)
        with self._reading(locked=False):
            return doc_snapshot(replay(stored))

    def blame(self, path: Path) -> BlameEntry | None:
        """The newest change that wrote ``path``, an ancestor or a descendant."""
        with self._reading():
            return sqllog.blame_row(self._conn, path)

    def conflicts(self, path: Path | None, since: float | None) -> list[ConflictRecord]:
        """Audited conflicts, oldest first, at or below ``path``, from time ``since``."""
        with self._reading():
            return sqllog.conflict_rows(self._conn, path, since)


def compact(
    conn: sqlite3.Connection,
    fold: int,
    keep_conflicts: int | None,
    *,
    measure: bool = True,
    on_change: Callable[[], None] | None = None,
) -> bool | None:
    """Fold the log rows up to seq ``fold`` into a new snapshot (one transaction).

    The old snapshot and those rows' updates are replayed into a fresh document,
    whose token must be the last row's (:func:`crdt_state._fold.fold`: a mismatch
    re-reads the rows with every token to name the damaged one); its encoding must
    decode to the same content; only then are the new snapshot inserted and the old
    one and the folded rows deleted. A failed check leaves the file as it was.

    Returns:
        ``None`` when there was nothing to fold; else whether the document is
        dominated by tombstones (a new epoch is due, see docs/architecture.md;
        only measured with ``measure``).

    Raises:
        StorageError: a check failed (nothing changed).
    """
    rows = sqllog.fold_input(conn, fold)
    if rows is None:
        return None
    folded = _fold.fold(rows, on_change, precise=lambda: replay(sqllog.load(conn, upto=fold)))
    written = sqllog.blame_paths_upto(conn, fold)
    gone = [p for p in written if doc_read(folded.doc, p) is MISSING]
    encoded = folded.encoded
    sqllog.swap_snapshot(conn, fold, rows.token.to_state(), encoded, gone, keep_conflicts)
    return measure and tombstones_dominate(encoded, folded.content)


def tombstones_dominate(encoded: bytes, content: dict[str, Any]) -> bool:
    """Whether a document encoded as ``encoded`` is mostly tombstones (a new epoch is due).

    True when it is more than :data:`_TOMBSTONE_FACTOR` times a fresh document of
    ``content``, plus :data:`_TOMBSTONE_SLACK`; both stores use this measure.
    """
    return len(encoded) > _TOMBSTONE_FACTOR * _fresh_size(content) + _TOMBSTONE_SLACK


def _fresh_size(content: dict[str, Any]) -> int:
    """The encoded size of a document holding ``content`` and nothing else."""
    return len(doc_from_content(content).get_update())
