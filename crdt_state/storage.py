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

import atexit
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from . import _sqlite_file as sqlfile
from . import _sqlite_log as sqllog
from ._group_commit import GroupCommit
from ._queued_items import Audit, Item, RememberedRequest
from ._sqlite_reads import SqliteReads, compact
from ._sqlite_writes import write_batch
from .conflicts import Conflict, StateUpdate
from .errors import StorageError
from .journal import (
    BlameEntry,
    ConflictRecord,
    DurableCallback,
    EpochStart,
    HistoryEntry,
    StoredState,
)
from .paths import Path
from .requests import RequestKey
from .version import VersionVector

__all__ = ["STORE_OPTIONS", "SqliteStore", "Store"]

DEFAULT_KEEP_HISTORY: Final = 1_000
DEFAULT_KEEP_CONFLICTS: Final = 10_000
STORE_OPTIONS: Final = ("durability", "keep_history", "keep_conflicts", "compact_document")
"""The keyword options of :meth:`SqliteStore.open` (``SharedState.open`` passes them on)."""


_open_stores: weakref.WeakSet[SqliteStore] = weakref.WeakSet()
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


@atexit.register
def _close_open_stores() -> None:  # flush what "off"/"normal" states still queue
    for store in list(_open_stores):
        store.close()


class SqliteStore:
    """The journal and history of one durable state (one open SQLite file).

    Items are queued under the state's lock, in order, each with a ticket;
    the writer thread commits everything queued in one transaction. After a
    write failure every later call raises :class:`StorageError`: changes made
    in memory since are not stored.
    """

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
    ) -> None:
        self.file = file
        self._identity: tuple[int, int] | None = None  # the file's (device, inode)
        self._conn = conn
        self._db = threading.Lock()  # guards the connection
        self._reads = SqliteReads(conn, self._db, file)
        self._is_new = is_new
        self.compact_document = compact_document
        self.epochs = 0
        self.durability = durability
        self.keep_history = keep_history
        self.keep_conflicts = keep_conflicts
        self.compactions = 0
        self.last_compaction_error: StorageError | None = None
        self._epoch_handler: Callable[[], Callable[[], bool] | None] | None = None
        self._ready = False  # loaded or created: closing may write to the file
        self._last_seq = 0
        self._log_rows = 0
        self._margin = max(64, keep_history // 4)
        self._commits = GroupCommit[Item](
            file, self._write, self._after_write, off=durability == "off"
        )
        _open_stores.add(self)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: sqlfile.Durability = "full",
        keep_history: int = DEFAULT_KEEP_HISTORY,
        keep_conflicts: int | None = DEFAULT_KEEP_CONFLICTS,
        compact_document: bool = True,
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

        Raises:
            StorageError: a foreign, damaged, newer or already open file (untouched).
        """
        if keep_history < 1:
            raise ValueError("keep_history must be at least 1")
        if keep_conflicts is not None and keep_conflicts < 0:
            raise ValueError("keep_conflicts must be >= 0 or None")
        file = os.fspath(path)
        if _held_here(file):
            raise sqlfile.in_this_process(file)
        conn, is_new = sqlfile.connect(file, durability)
        store = cls(
            conn,
            file,
            is_new=is_new,
            durability=durability,
            keep_history=keep_history,
            keep_conflicts=keep_conflicts,
            compact_document=compact_document,
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
        with self._db:
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

    def on_epoch_due(self, handler: Callable[[], bool]) -> None:
        """Call ``handler`` when compaction finds the document dominated by tombstones."""
        try:
            self._epoch_handler = weakref.WeakMethod(handler)
        except TypeError:  # not a bound method
            self._epoch_handler = lambda: handler

    # -- queueing --------------------------------------------------------------------
    def record(self, change: StateUpdate) -> int:
        """Queue ``change`` for the next group commit; return its ticket."""
        return self._enqueue(change)

    def record_epoch(self, epoch: EpochStart) -> int:
        """Queue a rebuilt document that replaces the stored history; a ticket."""
        return self._enqueue(epoch)

    def audit(self, conflicts: Sequence[Conflict], token: VersionVector) -> int:
        """Queue conflicts of a merge that wrote nothing (refused, or kept the current value)."""
        return self._enqueue(Audit(tuple(conflicts), token, time.time()))

    def remember_request(self, key: RequestKey, token: VersionVector, seq: int, clean: bool) -> int:
        """Queue an applied request that wrote nothing (``seq``: the head then); a ticket."""
        return self._enqueue(RememberedRequest(key, token, seq, clean))

    def _enqueue(self, item: Item) -> int:
        return self._commits.enqueue(item)

    # -- waiting ---------------------------------------------------------------------
    def wait(self, ticket: int) -> None:
        """Return once ``ticket`` is committed (at once with ``durability="off"``)."""
        self._commits.wait(ticket)

    def on_durable(self, ticket: int, done: DurableCallback) -> None:
        """Call ``done(None)`` once ``ticket`` is committed, ``done(error)`` if it never will be.

        ``done`` runs on the writer thread (or at once, on the caller's). With
        ``durability="off"`` it is called at once.
        """
        self._commits.on_durable(ticket, done)

    def last_ticket(self) -> int:
        """The ticket of the newest item queued so far (0 when none)."""
        return self._commits.last_ticket()

    def flush(self) -> None:
        """Wait until everything recorded so far is committed and settled.

        Whatever the durability; settled: any compaction those commits started
        has finished (queries read a settled file).

        Raises:
            StorageError: the store is closed.
        """
        self._commits.flush()

    # -- the writer thread (see crdt_state._group_commit) ------------------------------
    def _write(self, batch: list[tuple[int, Item]]) -> None:
        with self._db:
            self._commit(batch)  # looked up per call: tests slow it down

    def _after_write(self) -> None:
        if self._log_rows > self.keep_history + self._margin:
            self._compact()

    def _commit(self, batch: list[tuple[int, Item]]) -> None:
        """Write one group of queued items in one transaction, in their order."""
        written = write_batch(
            self._conn, [item for _, item in batch], self._last_seq, self._log_rows, self.file
        )
        self._last_seq, self._log_rows = written.last_seq, written.log_rows
        self.epochs += written.epochs

    def _compact(self) -> None:
        """Fold all but the newest ``keep_history`` log rows into a new snapshot."""
        try:
            with self._db:
                fold = self._last_seq - self.keep_history
                epoch_due = compact(
                    self._conn, fold, self.keep_conflicts, measure=self.compact_document
                )
                if epoch_due is None:  # nothing to fold
                    return
                self._log_rows = sqllog.count_log(self._conn)
            self.compactions += 1
            if self.compact_document and epoch_due:
                handler = self._epoch_handler() if self._epoch_handler is not None else None
                if handler is not None:
                    handler()
        except Exception as exc:  # the file is unchanged: keep going without compacting
            self.last_compaction_error = (
                exc if isinstance(exc, StorageError) else StorageError(f"compaction failed: {exc}")
            )
            self._margin *= 2  # do not retry on every commit

    # -- history -----------------------------------------------------------------------
    def history(
        self,
        *,
        agent: str | None = None,
        path: Any = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
    ) -> list[HistoryEntry]:
        """Retained changes, oldest first.

        Args:
            agent: only changes by this agent.
            path: only changes that wrote it, an ancestor or a descendant.
            since: only changes at or after this time.
            until: only changes at or before this time.
            limit: only the newest ``limit`` matches.
        """
        self.flush()
        return self._reads.history(agent=agent, path=path, since=since, until=until, limit=limit)

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The content when the state had exactly ``token``.

        Exact for the oldest retained version (the snapshot) and every token of
        the retained history.

        Raises:
            StaleBase: a version compacted away.
            UnknownBase: a token this state never had.
        """
        if not isinstance(token, VersionVector):
            raise TypeError("at() takes a VersionVector")
        self.flush()
        return self._reads.at(token)

    def blame(self, path: Path) -> BlameEntry | None:
        """The newest change that wrote ``path``, an ancestor or a descendant; None if none."""
        self.flush()
        return self._reads.blame(path)

    def conflicts(
        self, path: Path | None = None, since: float | None = None
    ) -> list[ConflictRecord]:
        """Audited conflicts, oldest first, at or below ``path``, from time ``since``."""
        self.flush()
        return self._reads.conflicts(path, since)

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Commit everything queued, checkpoint the WAL and release the file. Idempotent."""
        if not self._commits.close():
            return
        _open_stores.discard(self)
        ref = _open_files.get(self._identity or (-1, -1))
        if ref is not None and ref() in (self, None):
            del _open_files[self._identity or (-1, -1)]
        ready = self._ready and self._commits.failed is None
        if ready and self._log_rows > self.keep_history + self._margin:
            self._compact()  # the writer is gone: leave a compact file behind
        with self._db:
            try:
                if ready:
                    sqllog.checkpoint(self._conn)
            except sqlite3.Error:
                pass  # the WAL stays; the next opening recovers it
            finally:
                self._conn.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._commits.closed


Store = SqliteStore
"""Deprecated name of :class:`SqliteStore`."""
