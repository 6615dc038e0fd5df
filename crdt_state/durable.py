"""Durability: the glue between a :class:`~crdt_state.SharedState` and its store.

:class:`DurableMixin` gives ``SharedState`` what a state stored in a SQLite
file (:mod:`crdt_state.storage`) needs: opening one (``SharedState.open``),
reading its history, blame and conflict audit log, closing it, waiting until a
change is durable (``_settle``/``_asettle``; ``when_durable`` for every change
so far, which a sync hub uses to send out only durable changes), and the hooks
storage calls: ``_attach`` (make a store the journal), ``_restore`` (load
stored content without logging it as new) and ``_reset_document`` (rebuild
the Yjs document without tombstones, a new epoch). A state in memory has no store: waiting is a
no-op and the history readers raise ``TypeError``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self, cast

from pycrdt import Doc, Map

from . import document as ydoc
from .changelog import ChangeLog, WriteKind
from .errors import StateClosed
from .paths import Path, parse_path
from .replication import collect_writes, mirror_writes, root_most
from .values import nesting
from .version import VersionVector

if TYPE_CHECKING:
    from .state import Journal, SharedState
    from .storage import BlameEntry, ConflictRecord, HistoryEntry, Store

__all__ = ["DurableMixin"]


class DurableMixin:
    """Storage, history and durability waits (part of :class:`~crdt_state.SharedState`).

    Uses the state's lock, document, mirror, change log and journal, and its
    ``_on_transaction`` listener (declared below for typing).
    """

    _lock: threading.RLock
    _doc: Doc[Any]
    _root: Map[Any]
    _meta: Map[Any]
    _mirror: dict[str, Any]
    _log: ChangeLog
    _journal: Journal | None
    _store: Store | None
    _update_sub: Any
    _shared: bool
    _closed: bool
    _depth_mark: int
    epoch: int
    _on_transaction: Callable[[Any], None]

    @classmethod
    def open(cls, path: str | os.PathLike[str], **options: Any) -> SharedState:
        """Create or reopen a state stored in the SQLite file at ``path``.

        ``options`` are those of the constructor plus the storage options of
        :func:`crdt_state.storage.open_state` (``durability``, ...).
        """
        from .storage import open_state

        return open_state(cast("type[SharedState]", cls), path, **options)

    def _require_store(self) -> Store:
        if self._store is None:
            raise TypeError("history needs a state opened with SharedState.open(path)")
        self._check_open()
        return self._store

    def _check_open(self) -> None:
        """Raise :class:`StateClosed` once a durable state is closed (callers hold no lock
        or the state lock; nothing has changed yet)."""
        if self._closed:
            raise StateClosed(
                "the durable state is closed; nothing was changed (reopen the file)",
                details={"file": self._store.file if self._store is not None else None},
            )

    def history(self, **filters: Any) -> list[HistoryEntry]:
        """The recorded changes, oldest first (token, agent, paths, time)."""
        return self._require_store().history(**filters)

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The snapshot as it was when the state had exactly ``token``."""
        return self._require_store().at(token)

    def blame(self, path: Any) -> BlameEntry | None:
        """Who last changed ``path`` (writing it, an ancestor or a descendant), when and where."""
        return self._require_store().blame(parse_path(path))

    def conflicts(self, path: Any = None, since: float | None = None) -> list[ConflictRecord]:
        """Recorded conflicts and their resolutions, optionally for one path / since a time."""
        return self._require_store().conflicts(
            parse_path(path) if path is not None else None, since
        )

    def close(self) -> None:
        """Flush and close the storage of a durable state (no-op in memory). Idempotent.

        Merges already acknowledged stay durable. From then on every write
        raises :class:`StateClosed` and changes nothing, in memory or on disk:
        ``fork`` (and so ``transact``/``atransact``), merging or writing a
        branch forked earlier, ``commit``/``acommit``, ``apply_update``/
        ``aapply_update``; so do the readers that need the file (``history``,
        ``at``, ``blame``, ``conflicts``). Reads of the content kept in memory
        (``snapshot``, ``read``, ``get``, ``token``, ``get_update``) still work.
        """
        store = self._store
        if store is None:
            return
        with self._lock:  # a merge in progress finishes (and is journaled) first
            self._closed = True
        store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- waiting for durability ----------------------------------------------------
    def _settle(self, ticket: int | None) -> None:
        """Block until the change with ``ticket`` is durable (no-op in memory)."""
        if ticket is not None and self._journal is not None:
            self._journal.wait(ticket)

    async def _asettle(self, ticket: int | None) -> None:
        """Wait, without blocking the event loop, until ``ticket`` is durable."""
        journal = self._journal
        if ticket is None or journal is None:
            return
        on_durable = getattr(journal, "on_durable", None)
        if on_durable is None:
            await asyncio.to_thread(journal.wait, ticket)
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle_future, future, error)

        on_durable(ticket, done)
        await future

    def when_durable(self, callback: Callable[[BaseException | None], None]) -> None:
        """Call ``callback(None)`` once every change made so far is durable.

        "So far" means every change this state made or received, on any thread,
        before this call: merges, received updates, and whatever ``get_update``
        returned before it. ``callback(error)`` (a :class:`StorageError`) when one
        of them will never be stored (the file failed or was closed first).
        Durable means per the store's ``durability`` (``"off"``: at once).

        For a state in memory, or once those changes are durable already, the
        callback runs at once on the caller's thread; otherwise later, on the
        store's writer thread, so it must be quick and thread-safe (hand over
        with ``loop.call_soon_threadsafe``, say). Do not call this from a
        listener of :meth:`subscribe`: the change being told is not recorded yet.
        """
        with self._lock:  # a change is told and recorded under one hold of the lock
            store = self._store
            ticket = store.last_ticket() if store is not None else 0
        if store is None or ticket == 0:
            callback(None)
            return
        store.on_durable(ticket, callback)

    # -- hooks used by crdt_state.storage -------------------------------------------
    def _restore(
        self,
        snapshot: bytes,
        start_seq: int,
        changes: Iterable[tuple[bytes, str | None, str, float]],
    ) -> list[VersionVector]:
        """Load stored content into a fresh state without logging it as new changes.

        ``snapshot`` is a Yjs update with everything up to log position
        ``start_seq``; ``changes`` are the stored changes after it, oldest first,
        as ``(update, agent, origin, time)``. They are replayed into the change
        log with their own seqs, so fork bases among them are judged exactly and
        older bases are stale. Listeners and journal are not told. Returns the
        token after each change.
        """
        with self._lock:
            if self._log.head_seq != 0 or self._journal is not None:
                raise RuntimeError("only a fresh, unjournaled state can be restored")
            if snapshot:
                self._doc.apply_update(snapshot)
            self._mirror = ydoc.doc_snapshot(self._doc)
            token = VersionVector.from_state(self._doc.get_state())
            self._log = ChangeLog(token, limit=self._log.limit, start_seq=start_seq)
            tokens: list[VersionVector] = []
            changed: dict[Path, WriteKind] = {}
            on_events = collect_writes(changed, self._mirror)
            for update, agent, origin, when in changes:
                changed.clear()
                sub = self._root.observe_deep(on_events)
                try:
                    self._doc.apply_update(update)
                finally:
                    self._root.unobserve(sub)
                writes = root_most(changed)
                undo = mirror_writes(self._doc, self._mirror, writes)
                token = VersionVector.from_state(self._doc.get_state())
                self._log.append(agent, token, writes, undo, origin=origin).time = when
                tokens.append(token)
            self._depth_mark = nesting(self._mirror)
            return tokens

    def _reset_document(self) -> bool:
        """Rebuild the Yjs document from the content alone: a new epoch, no tombstones.

        A Yjs document keeps a small record of every overwritten map entry, so
        it grows with the number of merges. A durable state that never shared
        its document (no ``get_update``/``apply_update``/``subscribe``) can drop
        them: the content is written into a fresh document with a new client id.
        Tokens and fork bases of earlier epochs become stale (``StaleBase``;
        ``transact`` re-runs, ``branch.rebase()`` moves a branch over). The
        journal records the new document as a snapshot. Returns False (and does
        nothing) for a shared document.
        """
        from .state import StateUpdate

        with self._lock:
            if self._shared or self._closed:
                return False
            doc = ydoc.doc_from_content(self._mirror, meta={"epoch": self.epoch + 1})
            root = doc.get(ydoc.ROOT, type=Map)
            meta = doc.get(ydoc.META_ROOT, type=Map)
            if self._update_sub is not None:
                self._doc.unobserve(self._update_sub)
                self._update_sub = doc.observe(self._on_transaction)
            retired = set(self._log.retired) | set(self._log.head_token)
            self._doc, self._root, self._meta = doc, root, meta
            token = VersionVector.from_state(doc.get_state())
            seq = self._log.head_seq + 1
            self._log = ChangeLog(token, limit=self._log.limit, start_seq=seq, retired=retired)
            self.epoch += 1
            if self._journal is not None:
                self._journal.record(
                    StateUpdate(
                        seq=seq,
                        update=bytes(doc.get_update()),
                        token=token,
                        agent="crdt-state",
                        paths=(),
                        origin="reset",
                        time=time.time(),
                    )
                )
            return True

    def _attach(self, store: Store) -> None:
        """Make ``store`` the journal and history of this state (crdt_state.storage)."""
        with self._lock:
            if self._update_sub is None:  # the journal needs each change's update bytes
                self._update_sub = self._doc.observe(self._on_transaction)
            self._store = store
            self._journal = store


def _settle_future(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
