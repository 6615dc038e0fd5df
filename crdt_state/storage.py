"""The SQLite store: a durable state's journal and history in one SQLite file.

:class:`SqliteStore` implements :class:`crdt_state.journal.StateStore`;
``SharedState.open(path, **options)`` opens one and hands it to
:meth:`SharedState.open_store <crdt_state.SharedState.open_store>`. Changes
are queued under the state's lock and committed by one writer thread, many at
a time (group commit); compaction folds old log rows into a new snapshot and
may ask the state for a new epoch. docs/architecture.md explains durability
modes, compaction, epochs and client ids; :mod:`crdt_state._sqlite_file` the
file format. The store's write path (one batch in one transaction) is
:mod:`crdt_state._sqlite_writes`, its read path :mod:`crdt_state._sqlite_reads`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Final

from . import _sqlite_batch as sqlbatch
from . import _sqlite_file as sqlfile
from . import _sqlite_log as sqllog
from ._queued_items import Item
from ._queued_store import QueuedStore
from ._sqlite_reads import SqliteReads, compact
from ._sqlite_writes import write_batch
from .errors import ReadOnlyStore, StorageError
from .journal import (
    BlameEntry,
    StoredState,
)
from .progress import ProgressLog

__all__ = ["STORE_OPTIONS", "SqliteStore", "Store"]

DEFAULT_KEEP_HISTORY: Final = 1_000
DEFAULT_KEEP_CONFLICTS: Final = 10_000
STORE_OPTIONS: Final = (
    "durability",
    "keep_history",
    "keep_conflicts",
    "compact_document",
    "read_only",
)
"""The keyword options of :meth:`SqliteStore.open` (``SharedState.open`` passes them on)."""


_open_files: dict[tuple[int, int], weakref.ref[SqliteStore]] = {}
"""The open stores by file identity (device, inode): a second opening is refused."""


def _identity(file: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(file)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)


def _forget(identity: tuple[int, int]) -> Callable[[weakref.ref[SqliteStore]], None]:
    """A weakref callback dropping ``identity`` once its store is garbage (never closed)."""

    def drop(ref: weakref.ref[SqliteStore]) -> None:
        if _open_files.get(identity) is ref:
            del _open_files[identity]

    return drop


def _held_here(file: str) -> bool:
    """True when a store of this process holds ``file`` open."""
    ref = _open_files.get(_identity(file) or (-1, -1))
    store = ref() if ref is not None else None
    return store is not None and not store.closed


class SqliteStore(QueuedStore):
    """The journal and history of one durable state (one open SQLite file).

    Items are queued under the state's lock, in order, each with a ticket;
    the writer thread commits everything queued in one transaction
    (:class:`~crdt_state._queued_store.QueuedStore`). After a write failure
    every later call raises :class:`StorageError`: changes made in memory
    since are not stored.

    Opened ``read_only``, it holds no lock, reads a consistent version per query
    (a writer may be committing and compacting meanwhile) and refuses every write
    with :class:`ReadOnlyStore`.
    """

    shared_writers = True  # a hub's rooms: a few threads for all (see _writer_pool)

    def __init__(
        self,
        conn: sqlite3.Connection,
        file: str,
        *,
        is_new: bool,
        durability: sqlfile.Durability,
        keep_history: int,
        keep_conflicts: int | None,
        compact_document: bool = True,
        lock: int | None = None,
    ) -> None:
        self.file = file
        self._identity: tuple[int, int] | None = None  # the file's (device, inode)
        self._conn = conn
        self._lock = lock  # the writer lock's descriptor; None: read-only
        self.read_only = lock is None
        self._db = threading.Lock()  # guards the connection
        self._snapshots = SqliteReads(conn, self._db, file, snapshots=self.read_only)
        self._reads = self._snapshots
        self._is_new = is_new
        self.durability = durability
        self._batch_rows = False  # the connection has its batch view (_sqlite_batch.BATCH_ROWS)
        super().__init__(
            file,
            durability=durability,
            keep_history=keep_history,
            keep_conflicts=keep_conflicts,
            compact_document=compact_document,
        )

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: sqlfile.Durability = "full",
        keep_history: int = DEFAULT_KEEP_HISTORY,
        keep_conflicts: int | None = DEFAULT_KEEP_CONFLICTS,
        compact_document: bool = True,
        read_only: bool = False,
    ) -> SqliteStore:
        """Open (and lock) the state file at ``path``, created when missing.

        Args:
            path: the file; its directory must exist.
            durability: ``"full"`` (fsync per commit), ``"normal"`` (no fsync)
                or ``"off"`` (merges do not wait); see docs/architecture.md.
            keep_history: how many recent changes stay in the log for history,
                ``at`` and judging old fork bases after a reopen.
            keep_conflicts: how many audit-log rows are kept (``None``: all).
            compact_document: let compaction ask for a new epoch once tombstones
                dominate the document (off for states whose Yjs updates other
                replicas keep across sessions: the hub's rooms).
            read_only: only load and query an existing file, without a lock, even
                while a writer (a hub) holds it; nothing is ever written to it
                (see :func:`crdt_state._sqlite_file.connect_read_only`).

        Raises:
            StorageError: a foreign, damaged, newer or already open file (untouched);
                with ``read_only``, a missing file (``details["reason"]`` ``"missing"``)
                or one that is not a state file (``"not_a_state_file"``).
        """
        if keep_history < 1:
            raise ValueError("keep_history must be at least 1")
        if keep_conflicts is not None and keep_conflicts < 0:
            raise ValueError("keep_conflicts must be >= 0 or None")
        file = os.fspath(path)
        if read_only:
            return cls(
                sqlfile.connect_read_only(file),
                file,
                is_new=False,
                durability=durability,
                keep_history=keep_history,
                keep_conflicts=keep_conflicts,
                compact_document=compact_document,
            )
        if _held_here(file):
            raise sqlfile.in_this_process(file)
        conn, is_new, lock = sqlfile.connect(file, durability)
        store = cls(
            conn,
            file,
            is_new=is_new,
            durability=durability,
            keep_history=keep_history,
            keep_conflicts=keep_conflicts,
            compact_document=compact_document,
            lock=lock,
        )
        identity = _identity(file)
        if identity is not None:
            store._identity = identity
            _open_files[identity] = weakref.ref(store, _forget(identity))
        return store

    @property
    def name(self) -> str:
        """The file's path."""
        return self.file

    # -- opening a state -------------------------------------------------------------
    def load(self) -> StoredState | None:
        """The snapshot, log and remembered requests; ``None`` for a new file."""
        if self._is_new:
            return None
        with self._db, self._snapshots.snapshot():
            try:
                stored = sqllog.load(self._conn)
                requests = sqllog.recent_requests(self._conn)
            except StorageError as exc:
                exc.details.setdefault("file", self.file)
                raise
            except sqlite3.Error as exc:
                raise StorageError(
                    f"the state file is damaged: {exc}", details={"file": self.file}
                ) from exc
        self._last_seq = stored.snapshot_seq + len(stored.changes)
        self._log_rows = len(stored.changes)
        self._ready = True
        return StoredState(
            stored.snapshot_seq, stored.snapshot_token, stored.snapshot, stored.changes, requests
        )

    def create(self, initial: StoredState, blame: Sequence[BlameEntry]) -> None:
        """Give a new file its tables and first snapshot."""
        self._writable()
        rows = [(b.path, b.seq, b.agent, b.time, b.token.to_state()) for b in blame]
        token = initial.snapshot_token.to_state()
        with self._db:
            try:
                sqlfile.create(self._conn, initial.snapshot_seq, token, initial.snapshot, rows)
            except sqlite3.Error as exc:
                raise StorageError(
                    f"cannot create the state file: {exc}", details={"file": self.file}
                ) from exc
        self._last_seq = initial.snapshot_seq
        self._ready = True

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStore(
                "this state file was opened read_only: nothing is written to it",
                details={"file": self.file, "reason": "read_only"},
            )

    # -- the writer thread (see crdt_state._group_commit) ------------------------------
    def _write(self, batch: list[tuple[int, Item]]) -> None:
        with self._db:
            self._commit(batch)

    def _commit(self, batch: list[tuple[int, Item]]) -> None:
        """Write one group of queued items in one transaction, in their order."""
        if not self._batch_rows:
            sqlbatch.prepare_batch_rows(self._conn)
            self._batch_rows = True
        items = [item for _, item in batch]
        written = write_batch(
            self._conn, items, self._last_seq, self._log_rows, self.file, at_once=True
        )
        self._last_seq, self._log_rows = written.last_seq, written.log_rows
        self.epochs += written.epochs

    def _fold(self, fold: int, progress: ProgressLog) -> bool | None:
        with self._db:
            measure, on_change = self.compact_document, progress.advance
            epoch_due = compact(
                self._conn, fold, self.keep_conflicts, measure=measure, on_change=on_change
            )
            if epoch_due is not None:
                self._log_rows = sqllog.count_log(self._conn)
        return epoch_due

    # -- closing -------------------------------------------------------------------------
    def _forget(self) -> None:
        ref = _open_files.get(self._identity or (-1, -1))
        if ref is not None and ref() in (self, None):
            del _open_files[self._identity or (-1, -1)]

    def _release(self, ready: bool) -> None:
        """Checkpoint the WAL (when ``ready``) and close the file, then drop the lock."""
        with self._db:
            try:
                if ready:
                    sqllog.checkpoint(self._conn)
            except sqlite3.Error:
                pass  # the WAL stays; the next opening recovers it
            finally:
                if self._lock is None:
                    self._conn.close()
                else:
                    sqlfile.release(sqlfile.Writer(self._conn, False, self._lock))


Store = SqliteStore
"""Deprecated name of :class:`SqliteStore`."""
