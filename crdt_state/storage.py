"""The SQLite store: a durable state's journal and history in one SQLite file.

:class:`SqliteStore` implements :class:`crdt_state.journal.StateStore`;
``SharedState.open(path, **options)`` opens one and hands it to
:meth:`SharedState.open_store <crdt_state.SharedState.open_store>`. Changes
are queued under the state's lock and committed by one writer thread, many at
a time (group commit); compaction folds old log rows into a new snapshot and
may ask the state for a new epoch. docs/architecture.md explains durability
modes, compaction, epochs and client ids; :mod:`crdt_state._sqlite_file` the
file format.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import _sqlite_file as sqlfile
from . import _sqlite_log as sqllog
from ._sqlite_reads import SqliteReads, compact
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


@dataclass(frozen=True, slots=True)
class _Audit:
    conflicts: tuple[Conflict, ...]
    token: VersionVector
    time: float


@dataclass(frozen=True, slots=True)
class _Request:
    """An applied request that wrote nothing (no change row carries it)."""

    key: RequestKey
    token: VersionVector
    seq: int
    clean: bool


_Item = StateUpdate | EpochStart | _Audit | _Request
_open_stores: weakref.WeakSet[SqliteStore] = weakref.WeakSet()


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
        self._conn = conn
        self._db = threading.Lock()  # guards the connection
        self._reads = SqliteReads(conn, self._db)
        self._is_new = is_new
        self.compact_document = compact_document
        self.epochs = 0
        self.durability = durability
        self.keep_history = keep_history
        self.keep_conflicts = keep_conflicts
        self.compactions = 0
        self.last_compaction_error: StorageError | None = None
        self._epoch_handler: Callable[[], Callable[[], bool] | None] | None = None
        self._lock = threading.Lock()  # guards the queue and the counters below
        self._work = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._queue: list[tuple[int, _Item]] = []
        self._callbacks: list[tuple[int, DurableCallback]] = []
        self._issued = 0
        self._durable = 0
        self._settled = 0  # tickets whose commit and the compaction after it are done
        self._failed: StorageError | None = None
        self._closing = False
        self._closed = False
        self._ready = False  # loaded or created: closing may write to the file
        self._last_seq = 0
        self._log_rows = 0
        self._margin = max(64, keep_history // 4)
        self._thread = threading.Thread(target=self._run, name="crdt-state-writer", daemon=True)
        self._thread.start()
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
        conn, is_new = sqlfile.connect(file, durability)
        return cls(
            conn,
            file,
            is_new=is_new,
            durability=durability,
            keep_history=keep_history,
            keep_conflicts=keep_conflicts,
            compact_document=compact_document,
        )

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
        return self._enqueue(_Audit(tuple(conflicts), token, time.time()))

    def remember_request(self, key: RequestKey, token: VersionVector, seq: int, clean: bool) -> int:
        """Queue an applied request that wrote nothing (``seq``: the head then); a ticket."""
        return self._enqueue(_Request(key, token, seq, clean))

    def _enqueue(self, item: _Item) -> int:
        with self._lock:
            if self._failed is not None:
                raise StorageError(
                    "the state file failed earlier; this change is not stored",
                    details={"file": self.file, "cause": self._failed.message},
                )
            if self._closing:
                raise StorageError(
                    "the durable state is closed; this change is not stored (reopen the file)",
                    details={"file": self.file},
                )
            self._issued += 1
            self._queue.append((self._issued, item))
            self._work.notify()
            return self._issued

    # -- waiting ---------------------------------------------------------------------
    def wait(self, ticket: int) -> None:
        """Return once ``ticket`` is committed (at once with ``durability="off"``)."""
        if self.durability == "off":
            if self._failed is not None:
                raise self._failure()
            return
        self._wait(ticket)

    def on_durable(self, ticket: int, done: DurableCallback) -> None:
        """Call ``done(None)`` once ``ticket`` is committed, ``done(error)`` if it never will be.

        ``done`` runs on the writer thread (or at once, on the caller's). With
        ``durability="off"`` it is called at once.
        """
        with self._lock:
            if self.durability == "off" or self._durable >= ticket:
                error = self._failure() if self._failed is not None else None
            elif self._failed is not None:
                error = self._failure()
            else:
                self._callbacks.append((ticket, done))
                return
        done(error)

    def _fire(self, failed: bool) -> None:
        """Run the callbacks whose tickets are now durable (all of them on failure)."""
        with self._lock:
            if failed:
                ready, self._callbacks = self._callbacks, []
            else:
                ready = [(t, cb) for t, cb in self._callbacks if t <= self._durable]
                self._callbacks = [(t, cb) for t, cb in self._callbacks if t > self._durable]
            error = self._failure() if failed else None
        for _, callback in ready:
            callback(error)

    def _wait(self, ticket: int, settled: bool = False) -> None:
        """Wait until ``ticket`` is durable (``settled``: and compacted after, if due)."""
        with self._lock:
            while self._reached(ticket, settled) is False and self._failed is None:
                self._done.wait()
            if not self._reached(ticket, settled):
                raise self._failure()

    def _reached(self, ticket: int, settled: bool) -> bool:
        return (self._settled if settled else self._durable) >= ticket

    def _failure(self) -> StorageError:
        cause = self._failed.message if self._failed is not None else "closed"
        return StorageError(
            "the change could not be stored", details={"file": self.file, "cause": cause}
        )

    def last_ticket(self) -> int:
        """The ticket of the newest item queued so far (0 when none)."""
        with self._lock:
            return self._issued

    def flush(self) -> None:
        """Wait until everything recorded so far is committed, whatever the durability,
        and any compaction those commits started has finished (queries read a settled file).

        Raises:
            StorageError: the store is closed.
        """
        with self._lock:
            if self._closed:
                raise StorageError("the durable state is closed", details={"file": self.file})
            ticket = self._issued
        self._wait(ticket, settled=True)

    # -- the writer thread -------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._work.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                with self._db:
                    self._commit(batch)
            except BaseException as exc:
                error = exc if isinstance(exc, StorageError) else None
                with self._lock:
                    self._failed = error or StorageError(
                        f"writing the state file failed: {exc}", details={"file": self.file}
                    )
                    self._done.notify_all()
                self._fire(failed=True)
                return
            with self._lock:
                self._durable = batch[-1][0]
                self._done.notify_all()
            if self._callbacks:
                self._fire(failed=False)
            if self._log_rows > self.keep_history + self._margin:
                self._compact()
            with self._lock:
                self._settled = batch[-1][0]
                self._done.notify_all()

    def _commit(self, batch: list[tuple[int, _Item]]) -> None:
        """Write one group of queued items in one transaction, in their order."""
        conn = self._conn
        last_seq = self._last_seq
        added = 0
        changes: list[StateUpdate] = []
        epoch = False
        with sqlfile.transaction(conn):
            for _, item in batch:
                if isinstance(item, StateUpdate):
                    if item.seq != last_seq + 1:
                        raise self._out_of_order(last_seq, item.seq)
                    last_seq = item.seq
                    changes.append(item)
                    added += 1
                    continue
                sqllog.append_changes(conn, changes)  # keep the order of the items
                changes = []
                if isinstance(item, _Audit):
                    applied = all(c.resolved for c in item.conflicts)
                    token = item.token.to_state()
                    sqllog.append_conflicts(conn, item.conflicts, token, item.time, applied)
                elif isinstance(item, _Request):
                    key = item.key
                    token = item.token.to_state()
                    sqllog.remember_request(
                        conn, key.writer, key.request_id, item.seq, token, item.clean
                    )
                else:  # a new epoch: its document is the whole history
                    if item.seq != last_seq + 1:
                        raise self._out_of_order(last_seq, item.seq)
                    last_seq = item.seq
                    sqllog.restart_at(conn, item.seq, item.token.to_state(), item.document)
                    added = -self._log_rows
                    self.epochs += 1
                    epoch = True
            sqllog.append_changes(conn, changes)
        self._last_seq = last_seq
        self._log_rows += added
        if epoch:
            sqllog.release_free_pages(conn)

    def _out_of_order(self, last_seq: int, seq: int) -> StorageError:
        return StorageError(
            "the state and its file disagree on the change sequence",
            details={"file": self.file, "expected": last_seq + 1, "got": seq},
        )

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
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing = True
            self._work.notify()
        self._thread.join()
        if self._callbacks:  # tickets the writer never committed
            self._fire(failed=True)
        _open_stores.discard(self)
        ready = self._ready and self._failed is None
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
        return self._closed


Store = SqliteStore
"""Deprecated name of :class:`SqliteStore`."""
