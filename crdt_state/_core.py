"""The core of a SharedState: lock, Yjs document, mirror, change log, listeners, store.

:class:`StateCore` is the one object every part of a
:class:`~crdt_state.SharedState` works on (writing a plan, integrating
received updates, durability): they are functions over it, each in its own
module, and none of them knows ``SharedState``. The core records every
change it integrates in its change log, tells listeners, and hands the
change to its store (:class:`~crdt_state.journal.StateStore`), if it has one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pycrdt import Doc, Map

from . import _document as ydoc
from ._changelog import ChangeLog, Entry
from ._deep import DeepEvents
from ._entry_reads import read_at
from ._events import join_updates
from ._sizes import HISTORY_BYTES
from ._trial import TrialDocument
from ._waiting import WaitingUpdates
from .conflicts import Change, Conflict, StateUpdate, WriteKind
from .errors import ReadOnlyStore, StateClosed, WriteInListener
from .journal import StateStore, settle_on_loop
from .paths import Path
from .requests import RequestKey, RequestMemory
from .values import copy_value, normalize, tree_get
from .version import VersionVector

log = logging.getLogger("crdt_state.listeners")

if TYPE_CHECKING:
    from .schema import StateSchema

__all__ = ["Listener", "StateCore"]

Listener = Callable[[StateUpdate], object]
"""A listener of a state's changes; what it returns is ignored."""


class StateCore:
    """The data of one shared state and the few operations every part needs.

    Every field is guarded by :attr:`lock` (re-entrant). ``follower`` makes a
    pure mirror of an authority (a hub client's replica): it never writes on
    its own (no tick for a received deletion) and does not validate received
    updates (no schema or depth check: the authority validated them), unless
    ``check_depth`` (a follower guarding against a faulty authority).
    """

    def __init__(
        self,
        *,
        client_id: int | None,
        history: int,
        history_bytes: int = HISTORY_BYTES,
        follower: bool,
        schema: StateSchema | None,
        check_depth: bool | None = None,
    ) -> None:
        self.doc: Doc[Any] = Doc(client_id=client_id) if client_id is not None else Doc()
        self.root = self.doc.get(ydoc.ROOT, type=Map)
        self.meta = self.doc.get(ydoc.META_ROOT, type=Map)
        self.lock = threading.RLock()
        self.mirror: dict[str, Any] = {}
        self.log = ChangeLog(VersionVector(), limit=history, limit_bytes=history_bytes)
        self.listeners: list[Listener] = []
        self.updates: list[bytes] = []  # this transaction's Yjs updates (when observed)
        self.update_sub: Any = None
        self.deep = DeepEvents()  # the root's deep events, for whoever integrates an update
        self.store: StateStore | None = None
        self.tick_remote = not follower
        self.validate_updates = not follower
        # received values' depth is checked by default unless a follower (see SharedState)
        self.check_depth = not follower if check_depth is None else check_depth
        # Set once the document was handed to anyone else (updates out or in,
        # listeners): from then on it must keep its identity (no new epoch).
        self.shared = False
        self.requests = RequestMemory()
        self.closed = False
        self.read_only = False  # opened on a read-only store: every write is refused
        self.telling = False  # listeners are being told a change: every write is refused
        # at least as deep as any value in the state (see values.MAX_DEPTH): bounds the
        # depth of values received from other replicas without reading the document
        self.depth_mark = 0
        self.held: bytes | None = None  # received structs Yjs keeps pending
        self.waiting = WaitingUpdates()  # peers' updates waiting for earlier clocks
        # peers' updates are tried on a copy of the document first (see _trial)
        self.trial = TrialDocument() if self.validate_updates else None
        self.epoch = 0
        self.schema = schema

    # -- guards ---------------------------------------------------------------------
    def check_open(self) -> None:
        """Raise :class:`StateClosed` once a durable state is closed (nothing changed yet)."""
        if self.closed:
            raise StateClosed(
                "the durable state is closed; nothing was changed (reopen the file)",
                details={"file": self.store.name if self.store is not None else None},
            )

    def check_writable(self) -> None:
        """Raise :class:`StateClosed` or :class:`ReadOnlyStore` unless writes may proceed.

        Called before anything changes.

        Raises:
            WriteInListener: a listener (being told a change) tried to write.
        """
        if self.telling:
            raise WriteInListener(
                "a listener may not change the state it listens to (nothing was changed; "
                "hand the write to another thread or task)"
            )
        self.check_open()
        if self.read_only:
            store = self.store
            raise ReadOnlyStore(
                "the state was opened read_only; nothing was changed",
                details={"file": store.name if store is not None else None, "reason": "read_only"},
            )

    # -- reading at a log position -----------------------------------------------------
    def read_at(self, path: Path, seq: int) -> Any:
        """A copy of the value ``path`` had at log position ``seq``.

        Raises:
            StaleBase: ``seq`` is older than the retained history.
        """
        with self.lock:
            current = tree_get(self.mirror, path)
            if seq != self.log.head_seq:
                current = read_at(current, path, self.log.for_reading(seq, path))
            return copy_value(current)

    def keys_at(self, seq: int) -> set[str]:
        """Every top-level key that may have had a value at log position ``seq``."""
        with self.lock:
            keys = set(self.mirror)
            keys.update(self.log.keys_since(seq))
            return keys

    # -- the typed hooks every write goes through ------------------------------------
    def prepare_value(self, path: Path, value: Any) -> Any:
        """Validate and normalise a value about to be written at ``path``."""
        if self.schema is not None:
            return self.schema.prepare(path, value)
        return normalize(value, path)

    def prepare_items(self, path: Path, items: list[Any]) -> list[Any]:
        """Validate and normalise items about to be appended at ``path``."""
        if self.schema is not None:
            return self.schema.prepare_items(path, items)
        return [normalize(v, path, level=len(path) + 1) for v in items]

    def check_plan(self, writes: list[Change]) -> None:
        """Refuse writes that would leave the state invalid (under the lock)."""
        if self.schema is not None and writes:
            self.schema.check_plan(self.mirror, writes)

    # -- recording changes -----------------------------------------------------------
    def observe_updates(self) -> None:
        """Collect each transaction's Yjs update (listeners and stores need the bytes)."""
        if self.update_sub is None:
            self.update_sub = self.doc.observe(self._on_transaction)

    def stop_observing(self) -> None:
        """Drop the update and deep observers of a closed state (it writes nothing more).

        The document's callback holds the core, a cycle through pycrdt that the garbage
        collector cannot see, so a closed state would otherwise never be freed.
        """
        if self.update_sub is not None:
            self.doc.unobserve(self.update_sub)
            self.update_sub = None
        self.deep.detach()

    def _on_transaction(self, event: Any) -> None:
        self.updates.append(bytes(event.update))

    def replace_document(self, doc: Doc[Any]) -> None:
        """Make ``doc`` the document (a new epoch), moving the update observer over."""
        if self.update_sub is not None:
            self.doc.unobserve(self.update_sub)
            self.update_sub = doc.observe(self._on_transaction)
        self.deep.detach()  # subscribed again on the new root when next needed
        if self.trial is not None:
            self.trial.drop()
        self.doc = doc
        self.root = doc.get(ydoc.ROOT, type=Map)
        self.meta = doc.get(ydoc.META_ROOT, type=Map)

    def tick(self) -> None:
        """Advance this replica's clock (a write to the meta root).

        Deletions alone add no operations to a Yjs document; without a tick,
        the versions before and after a deletion would be equal tokens.
        """
        self.meta["tick"] = self.log.head_seq + 1

    def record(
        self,
        agent: str | None,
        writes: dict[Path, WriteKind],
        undo: list[tuple[Path, Any]],
        origin: str,
        conflicts: tuple[Conflict, ...] = (),
        update: bytes | None = None,
        state: bytes | None = None,
        request: RequestKey | None = None,
    ) -> tuple[Entry, StateUpdate | None]:
        """Log the change just written; return it as a :class:`StateUpdate` (to store and tell).

        The :class:`StateUpdate` (and its update bytes) is only built when someone
        listens or a store records it; otherwise ``None`` is returned.

        Args:
            agent: who made the change.
            writes: the root-most paths written, and how.
            undo: ``(path, value before)`` records, in application order.
            origin: ``"local"`` (a merge) or ``"remote"`` (a received update).
            conflicts: the conflicts the merge met.
            update: the change's Yjs update, when the caller has it (else the
                collected transaction updates).
            state: the document's state vector, when the caller already has it.
            request: the request key of the merge that made the change.
        """
        token = VersionVector.from_state(self.doc.get_state() if state is None else state)
        entry = self.log.append(agent, token, writes, undo, origin=origin, request=request)
        if not self.listeners and self.store is None:
            self.updates.clear()
            return entry, None
        if update is None:
            update = (
                b"".join(self.updates) if len(self.updates) == 1 else join_updates(self.updates)
            )
        self.updates.clear()
        change = StateUpdate(
            seq=entry.seq,
            update=update,
            token=token,
            agent=agent,
            paths=tuple(writes),
            origin=origin,
            time=entry.time,
            conflicts=conflicts,
            request_id=None if request is None else request.request_id,
            writer=None if request is None else request.writer,
        )
        return entry, change

    def _tell(self, change: StateUpdate) -> None:
        """Call every listener with ``change``; one that raises is logged, not propagated.

        The change is made and stored whatever a listener does; it still has to be
        answered, so a listener's error (or its write, refused meanwhile) must not
        stop that. An interrupt (``KeyboardInterrupt``, ``CancelledError``) propagates.
        """
        self.telling = True
        try:
            for listener in list(self.listeners):
                try:
                    listener(change)
                except Exception:
                    log.exception("a listener raised on change %d (the change stands)", change.seq)
        finally:
            self.telling = False

    def store_change(self, change: StateUpdate | None) -> int | None:
        """Hand ``change`` to the store, then tell the listeners (under the lock).

        Returns the store's ticket, or None without a store. Stored first: a listener
        that raises (even ``KeyboardInterrupt``, which then propagates) cannot leave the
        file and the state disagreeing on the change sequence.
        """
        if change is None:
            return None
        ticket = self.store.record(change) if self.store is not None else None
        if self.listeners:
            self._tell(change)
        return ticket

    # -- waiting for the disk ----------------------------------------------------------
    def wait_durable(self, ticket: int | None) -> None:
        """Block until the change with ``ticket`` is durable (no-op in memory)."""
        if ticket is not None and self.store is not None:
            self.store.wait(ticket)

    async def await_durable(self, ticket: int | None) -> None:
        """Wait, without blocking the event loop, until ``ticket`` is durable."""
        store = self.store
        if ticket is None or store is None:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        store.on_durable(ticket, settle_on_loop(future))
        await future
