"""The storage interface of durable states: what a store does, and the records it returns.

A :class:`~crdt_state.SharedState` that is stored somewhere talks to its store
through :class:`StateStore` only, and the store never sees the state: the
state records each change it integrates (:meth:`StateStore.record`), waits
for it to become durable, and on reopening reads the stored snapshot and log
back (:meth:`StateStore.load`) and replays them itself. The SQLite file of
:mod:`crdt_state.storage` is the first implementation; a PostgreSQL store is
a second one with nothing above this interface changed.

The records, one name per concept:

- :class:`StoredChange`: one change as a store keeps it (with its Yjs update).
- :class:`StoredRequest`: one remembered request (idempotency key) and what it did.
- :class:`StoredState`: what a store holds for reopening: snapshot, changes, requests.
- :class:`EpochStart`: a rebuilt document that replaces the whole stored history.
- :class:`HistoryEntry`: one stored change as :meth:`SharedState.history` returns it.
- :class:`BlameEntry`: the last change of a path.
- :class:`ConflictRecord`: one audited conflict.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .conflicts import Conflict, StateUpdate
from .paths import Path
from .requests import RequestKey
from .values import same
from .version import VersionVector

__all__ = [
    "BlameEntry",
    "ConflictRecord",
    "DurableCallback",
    "EpochStart",
    "HistoryEntry",
    "StateStore",
    "StoredChange",
    "StoredRequest",
    "StoredState",
    "settle_on_loop",
]

DurableCallback = Callable[[BaseException | None], None]
"""Called with ``None`` once a change is durable, or with the error that stops it."""


def settle_on_loop(future: asyncio.Future[None]) -> DurableCallback:
    """A :data:`DurableCallback` that settles ``future``, callable from any thread.

    Stores call back on their own thread: the callback hands the outcome to the
    future's event loop, where ``future`` gets the result ``None`` or the error. The
    outcomes handed to one loop while it has not run them yet wait in one list and are
    settled by one callback of the loop, in the order they came (a batch of merges made
    durable together wakes the loop once, not once per merge). A future already done
    (cancelled, or settled by an earlier call) is left as it is.

    Raises:
        RuntimeError: (from the callback) the loop is closed.
    """
    loop = future.get_loop()
    settler = _settlers.get(loop)
    if settler is None:
        settler = _settlers.setdefault(loop, _Settler(loop))
    add = settler.add

    def done(error: BaseException | None) -> None:
        add(future, error)

    return done


class _Settler:
    """The outcomes handed to one event loop and not settled yet (see :func:`settle_on_loop`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._outcomes: list[tuple[asyncio.Future[None], BaseException | None]] = []

    def add(self, future: asyncio.Future[None], error: BaseException | None) -> None:
        """Settle ``future`` on its loop soon (any thread); the first outcome wakes the loop."""
        with self._lock:
            self._outcomes.append((future, error))
            if len(self._outcomes) > 1:
                return  # the loop was woken already and has not run them yet
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("Event loop is closed")
            loop.call_soon_threadsafe(self.run)
        except RuntimeError:  # the loop is closed: nothing will run them
            with self._lock:
                self._outcomes.clear()
            raise

    def run(self) -> None:
        """Settle every outcome handed in so far (on the loop), oldest first."""
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
        for future, error in outcomes:
            _settle(future, error)


_settlers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Settler] = (
    weakref.WeakKeyDictionary()
)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


@dataclass(frozen=True, slots=True)
class StoredChange:
    """One stored change: the state's ``token`` after it and the Yjs ``update`` that made it.

    ``origin`` is ``"local"`` for merges and ``"remote"`` for received updates;
    ``seq`` its position in the state's history (1 = first change).
    """

    seq: int
    token: VersionVector
    update: bytes
    agent: str | None
    origin: str
    time: float
    paths: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """One remembered request (see :mod:`crdt_state.requests`).

    ``seq`` is the change it made (the head seq, and ``paths`` empty, when it
    wrote nothing); ``clean``: applied without any conflict.
    """

    key: RequestKey
    seq: int
    token: VersionVector
    paths: tuple[Path, ...]
    clean: bool


@dataclass(frozen=True, slots=True)
class StoredState:
    """What a store holds.

    A snapshot (a Yjs update with every change up to ``snapshot_seq``), the
    changes after it, oldest first, and the newest remembered requests, oldest first.
    """

    snapshot_seq: int
    snapshot_token: VersionVector
    snapshot: bytes
    changes: Sequence[StoredChange] = ()
    requests: Sequence[StoredRequest] = field(default=())

    @property
    def head(self) -> VersionVector:
        """The token after the newest stored change."""
        return self.changes[-1].token if self.changes else self.snapshot_token


@dataclass(frozen=True, slots=True)
class EpochStart:
    """A document rebuilt from its content (a new epoch, see docs/architecture.md).

    ``document`` (a Yjs update) becomes the whole stored history up to
    ``seq``; older changes are dropped, blame and the audit log are kept.
    """

    seq: int
    token: VersionVector
    document: bytes
    time: float


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One stored change: the state's ``token`` after it, who made it and what it wrote.

    ``origin`` is ``"local"`` for merges and ``"remote"`` for received updates;
    ``seq`` is its position in the state's history (1 = first change).
    """

    seq: int
    token: VersionVector
    agent: str | None
    paths: tuple[Path, ...]
    time: float
    origin: str


@dataclass(frozen=True, slots=True)
class BlameEntry:
    """The last change of a path.

    ``path`` is the path that change actually wrote (the path asked about, an
    ancestor or a descendant of it).
    """

    path: Path
    agent: str | None
    time: float
    token: VersionVector
    seq: int


@dataclass(frozen=True, slots=True)
class ConflictRecord:
    """One audited conflict and how it was settled.

    ``base``/``current``/``incoming``/``resolution`` are as in :class:`Conflict`
    (:data:`MISSING` = absent, :data:`UNRESOLVED` = no policy settled it);
    ``applied`` is false when the merge was refused (nothing written);
    ``token`` is the state's version after the merge (or at the refusal).
    """

    path: Path
    base: Any
    current: Any
    incoming: Any
    current_agent: str | None
    incoming_agent: str | None
    policy: str | None
    resolution: Any
    applied: bool
    token: VersionVector
    time: float

    @property
    def same_value(self) -> bool:
        """True when both sides wrote the same value (see :attr:`Conflict.same_value`)."""
        return same(self.incoming, self.current)

    @property
    def agents(self) -> tuple[str | None, str | None]:
        """``(current_agent, incoming_agent)``."""
        return (self.current_agent, self.incoming_agent)


class StateStore(Protocol):
    """Where a durable state keeps its history; the state's only view of storage.

    Writing: :meth:`record`, :meth:`record_epoch`, :meth:`audit` and
    :meth:`remember_request` are called under the state's lock, in the
    state's order, and return a ticket at once; the store makes the items
    durable in that order (a change is never stored without every change
    before it). :meth:`wait` / :meth:`on_durable` report when a ticket is
    durable. After a write failure every later call raises
    :class:`~crdt_state.errors.StorageError`.

    Reading: :meth:`load` (for reopening), :meth:`history`, :meth:`at`,
    :meth:`blame`, :meth:`conflicts` answer from what is durable plus what
    was recorded before the call.
    """

    @property
    def name(self) -> str:
        """Where the state is stored (a file name, a database and key), for messages."""
        ...

    def load(self) -> StoredState | None:
        """What the store holds, or ``None`` for a new, empty store.

        Raises:
            StorageError: the stored data is damaged.
        """
        ...

    def create(self, initial: StoredState, blame: Sequence[BlameEntry]) -> None:
        """Store the first snapshot of a new state (and the blame of its changes)."""
        ...

    def on_epoch_due(self, handler: Callable[[], bool]) -> None:
        """Register what to call when the store wants the document rebuilt (a new epoch).

        The store calls ``handler()`` from any thread; it returns False when
        the state declines (its document is shared). The store keeps the
        handler weakly when it is a bound method.
        """
        ...

    def record(self, change: StateUpdate) -> int:
        """Queue a change; returns its ticket."""
        ...

    def record_epoch(self, epoch: EpochStart) -> int:
        """Queue a rebuilt document that replaces the stored history; returns a ticket."""
        ...

    def audit(self, conflicts: Sequence[Conflict], token: VersionVector) -> int:
        """Queue conflicts of a merge that wrote nothing (refused, or kept the current value)."""
        ...

    def remember_request(self, key: RequestKey, token: VersionVector, seq: int, clean: bool) -> int:
        """Queue an applied request that wrote nothing (``seq``: the head then)."""
        ...

    def last_ticket(self) -> int:
        """The ticket of the newest item queued so far (0 when none)."""
        ...

    def wait(self, ticket: int) -> None:
        """Return once ``ticket`` is durable (per the store's durability setting).

        Raises:
            StorageError: it never will be.
        """
        ...

    def on_durable(self, ticket: int, done: DurableCallback) -> None:
        """Call ``done(None)`` once ``ticket`` is durable, ``done(error)`` if it never will be."""
        ...

    def flush(self) -> None:
        """Wait until everything queued so far is stored and any maintenance it started ended."""
        ...

    def history(
        self,
        *,
        agent: str | None = None,
        path: Any = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
    ) -> list[HistoryEntry]:
        """Retained changes, oldest first (filters as :meth:`SharedState.history`)."""
        ...

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The content when the state had exactly ``token``."""
        ...

    def blame(self, path: Path) -> BlameEntry | None:
        """The newest change that wrote ``path``, an ancestor or a descendant."""
        ...

    def conflicts(
        self, path: Path | None = None, since: float | None = None
    ) -> list[ConflictRecord]:
        """Audited conflicts, oldest first, at or below ``path``, from time ``since``."""
        ...

    def close(self) -> None:
        """Store everything queued and release the storage. Idempotent."""
        ...
