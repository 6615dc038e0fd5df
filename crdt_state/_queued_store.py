"""The engine-neutral half of a store: queueing, durability, compaction rhythm, queries.

:class:`QueuedStore` is the common base of :class:`~crdt_state.storage.SqliteStore`
and :class:`~crdt_state.postgres.PostgresStore`. It queues the items of
:mod:`crdt_state._queued_items` on a :class:`~crdt_state._group_commit.GroupCommit`
(tickets, waiting, durability callbacks, flush), decides when to compact and
what a failed compaction means, calls the epoch handler, and answers the
history queries by flushing and then asking the engine's reader. The engine
supplies the hooks (here they raise :class:`NotImplementedError`): ``_write``
(one batch on the writer thread), ``_fold`` (one compaction), ``_release``
(closing the connection) and ``_reads``.

A compaction logs ``compaction_start``, ``compaction_progress`` (rows replayed so far)
and ``compaction_done`` (``done`` rows folded of ``total``, ``error``) on the
``crdt_state.storage`` logger, with ``store`` (the store's name); at DEBUG unless it
takes half a second or more (:mod:`crdt_state.progress`).
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._group_commit import GroupCommit
from ._group_rounds import RoundCommit, Rounds, Steps
from ._history_query import HistoryQuery
from ._queued_items import Audit, Item, RememberedRequest
from .conflicts import Conflict, StateUpdate
from .errors import StorageError, WrongType
from .journal import BlameEntry, ConflictRecord, DurableCallback, EpochStart, HistoryEntry
from .paths import Path
from .progress import ProgressLog
from .requests import RequestKey
from .version import VersionVector

__all__ = ["QueuedStore", "StoreReads"]


class StoreReads(Protocol):
    """An engine's history queries (the caller has flushed the store's writes)."""

    def history(self, query: HistoryQuery) -> list[HistoryEntry]:
        """Retained changes, oldest first, that ``query`` wants."""
        ...

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The content when the state had exactly ``token``."""
        ...

    def blame(self, path: Path) -> BlameEntry | None:
        """The newest change that wrote ``path``, an ancestor or a descendant."""
        ...

    def conflicts(self, path: Path | None, since: float | None) -> list[ConflictRecord]:
        """Audited conflicts, oldest first, at or below ``path``, from time ``since``."""
        ...


_open_stores: weakref.WeakSet[QueuedStore] = weakref.WeakSet()
log = logging.getLogger("crdt_state.storage")


@atexit.register
def _close_open_stores() -> None:  # store what "off"/"normal" states still queue
    for store in list(_open_stores):
        store.close()


class QueuedStore:
    """Queueing, durability and queries of a store; the engine writes, folds and releases.

    Items are queued under the state's lock, in order, each with a ticket;
    the writer thread stores everything queued in one transaction. After a
    write failure every later call raises :class:`StorageError`: changes made
    in memory since are not stored.

    Args:
        name: where the items go, for error messages.
        durability: ``"off"`` makes :meth:`wait` and :meth:`on_durable` return at once.
        keep_history: changes kept in the log after compaction.
        keep_conflicts: audited conflicts kept (``None``: all).
        compact_document: let compaction ask for a new epoch.
    """

    read_only: bool = False
    """True for a store that only loads and queries (queueing raises)."""
    shared_writers: bool = False
    """Write on the process's shared writer threads (:mod:`crdt_state._writer_pool`),
    not on a thread of the store's own."""
    _reads: StoreReads

    def __init__(
        self,
        name: str,
        *,
        durability: str,
        keep_history: int,
        keep_conflicts: int | None,
        compact_document: bool,
    ) -> None:
        self._name = name
        self.keep_history = keep_history
        self.keep_conflicts = keep_conflicts
        self.compact_document = compact_document
        self.epochs = 0
        self.compactions = 0
        self.last_compaction_error: StorageError | None = None
        self._epoch_handler: Callable[[], Callable[[], bool] | None] | None = None
        self._ready = False  # loaded or created: closing may write
        self._last_seq = 0
        self._log_rows = 0
        self._margin = max(64, keep_history // 4)
        self._off = durability == "off"
        self._commits: GroupCommit[Item] = GroupCommit[Item](
            name,
            self._write,
            self._after_write,
            off=self._off,
            shared=self.shared_writers,
        )
        _open_stores.add(self)

    # -- the engine's hooks --------------------------------------------------------------
    def _write(self, batch: list[tuple[int, Item]]) -> None:
        """Store one batch of ``(ticket, item)`` in one transaction (on the writer thread)."""
        raise NotImplementedError

    def _stage(self, batch: list[tuple[int, Item]]) -> Steps:
        """Record one batch as its part of a round, then take the round's outcome.

        For a store written in rounds (:meth:`_write_in_rounds`; see
        :data:`crdt_state._group_rounds.Stage`).
        """
        raise NotImplementedError

    def _write_in_rounds(self, rounds: Rounds) -> None:
        """From now on let ``rounds`` write the batches (before anything is queued)."""
        assert self._commits.last_ticket() == 0
        self._commits = RoundCommit[Item](
            self._name,
            rounds,
            self._stage,
            self._after_write,
            self._compaction_due,
            off=self._off,
        )

    def _fold(self, fold: int, progress: ProgressLog) -> bool | None:
        """Fold the log up to seq ``fold`` into a new snapshot and recount ``_log_rows``.

        ``progress.advance()`` after each log row replayed.

        Returns:
            ``None`` when there was nothing to fold; else whether a new epoch is due.

        Raises:
            Exception: any failure (nothing changed).
        """
        raise NotImplementedError

    def _release(self, ready: bool) -> None:
        """Close the connection (``ready``: the store is intact and may still write)."""
        raise NotImplementedError

    def _writable(self) -> None:
        """Raise when the store may not queue anything (see :attr:`read_only`)."""

    def _compaction_failed(self, error: StorageError) -> None:
        """React to a failed compaction (after it is recorded)."""

    # -- queueing --------------------------------------------------------------------
    def on_epoch_due(self, handler: Callable[[], bool]) -> None:
        """Call ``handler`` when compaction finds the document dominated by tombstones."""
        try:
            self._epoch_handler = weakref.WeakMethod(handler)
        except TypeError:  # not a bound method
            self._epoch_handler = lambda: handler

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
        self._writable()
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
        has finished (queries read a settled store).

        Raises:
            StorageError: the store is closed or failed.
        """
        self._commits.flush()

    # -- compaction (on the writer thread, or closing) ----------------------------------
    def _after_write(self) -> None:
        if self._compaction_due():
            self._compact()

    def _compaction_due(self) -> bool:
        return self._log_rows > self.keep_history + self._margin

    def _compact(self) -> None:
        """Fold all but the newest ``keep_history`` log rows into a new snapshot."""
        rows = max(0, self._log_rows - self.keep_history)
        what = f"compacting {self._name}"
        progress = ProgressLog(log, "compaction", what, rows, unit="rows", quiet=True,
                               store=self._name)  # fmt: skip
        progress.start()
        try:
            epoch_due = self._fold(self._last_seq - self.keep_history, progress)
            progress.finish(error=None)
            if epoch_due is None:  # nothing to fold
                return
            self.compactions += 1
            if self.compact_document and epoch_due:
                handler = self._epoch_handler() if self._epoch_handler is not None else None
                if handler is not None:
                    handler()
        except Exception as exc:  # nothing changed: keep going without compacting
            error = (
                exc if isinstance(exc, StorageError) else StorageError(f"compaction failed: {exc}")
            )
            self.last_compaction_error = error
            progress.finish(error=error.message)  # nothing changed
            self._compaction_failed(error)
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
        return self._reads.history(HistoryQuery.of(agent, path, since, until, limit))

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The content when the state had exactly ``token``.

        Exact for the oldest retained version (the snapshot) and every token of
        the retained history.

        Raises:
            StaleBase: a version compacted away.
            UnknownBase: a token this state never had.
        """
        if not isinstance(token, VersionVector):
            raise WrongType(
                f"at() takes a VersionVector (a token), not {type(token).__name__}"
                " (VersionVector.from_text(text) reads a printed one)",
                details={"token": repr(token)[:80]},
            )
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
        """Store everything queued, compact if due, then release the storage. Idempotent."""
        if not self._commits.close():
            return
        _open_stores.discard(self)
        self._forget()
        ready = self._ready and self._commits.failed is None and not self.read_only
        if ready and self._log_rows > self.keep_history + self._margin:
            self._compact()  # the writer is gone: leave a compact store behind
        self._release(ready)

    def _forget(self) -> None:
        """Drop the store from the engine's tables of open stores (closing)."""

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._commits.closed
