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
from typing import Any, NoReturn, Protocol

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
    "call_on_loop",
    "settle_on_loop",
]

DurableCallback = Callable[[BaseException | None], None]
"""Called with ``None`` once a change is durable, or with the error that stops it."""


def settle_on_loop(future: asyncio.Future[None]) -> DurableCallback:
    """A :data:`DurableCallback` that settles ``future``, callable from any thread.

    Stores call back on their own thread: the callback hands the outcome to the
    future's event loop (:func:`call_on_loop`), where ``future`` gets the result
    ``None`` or the error. A future already done (cancelled, or settled by an earlier
    call) is left as it is.
    """
    calls = _calls_of(future.get_loop())

    def done(error: BaseException | None) -> None:
        calls.add(_settle, (future, error))

    return done


def call_on_loop(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: Any
) -> None:
    """``loop.call_soon_threadsafe(callback, *args)``, waking ``loop`` once per burst.

    The calls handed to one loop while it has not run them yet wait in one list, run
    by one callback of the loop in the order they came (a writer thread that made the
    batches of many rooms durable wakes the loop once, not once per room). A call
    that raises is reported to the loop's exception handler; the others still run.

    Raises:
        RuntimeError: the loop is closed.
    """
    _calls_of(loop).add(callback, args)


class _LoopCalls:
    """The calls handed to one event loop and not run yet (see :func:`call_on_loop`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def add(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        """Run ``callback(*args)`` on the loop soon (any thread); the first call wakes it."""
        loop = self._loop()
        if loop is None or loop.is_closed():
            self._closed()
        with self._lock:
            self._calls.append((callback, args))
            if len(self._calls) > 1:
                return  # the loop was woken already and has not run them yet
        try:
            loop.call_soon_threadsafe(self.run)
        except RuntimeError:  # closed meanwhile: nothing will run them
            self._closed()

    def _closed(self) -> NoReturn:
        with self._lock:
            self._calls.clear()
        raise RuntimeError("Event loop is closed")

    def run(self) -> None:
        """Run every call handed in so far (on the loop), oldest first."""
        with self._lock:
            calls, self._calls = self._calls, []
        for callback, args in calls:
            try:
                callback(*args)
            except Exception as exc:  # as the loop reports a failed callback of its own
                loop = self._loop()
                if loop is not None:
                    loop.call_exception_handler(
                        {"message": f"Exception in callback {callback!r}", "exception": exc}
                    )


_loop_calls: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopCalls] = (
    weakref.WeakKeyDictionary()
)


def _calls_of(loop: asyncio.AbstractEventLoop) -> _LoopCalls:
    calls = _loop_calls.get(loop)
    if calls is None:
        calls = _loop_calls.setdefault(loop, _LoopCalls(loop))
    return calls


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
