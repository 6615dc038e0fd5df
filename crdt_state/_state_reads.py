"""The read side of a :class:`~crdt_state.state.SharedState`: content, history, typed views.

:class:`StateReads` is a base of ``SharedState``: every method here reads through the
one :class:`~crdt_state._core.StateCore` the state owns (no other field), so the write
side (``state.py``: opening, merges, commits, closing), the exchange with other replicas
(``_state_exchange.py``) and the read side stay apart. Not API: the names are
``SharedState``'s, documented there.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, cast

from ._core import StateCore
from .errors import WrongType
from .journal import BlameEntry, ConflictRecord, HistoryEntry, StateStore, settle_on_loop
from .model_type import ModelT
from .paths import Path, parse_path
from .resolvers import PolicyTable
from .times import as_time
from .values import MISSING, copy_value, tree_get
from .version import VersionVector

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .schema import StateSchema

__all__ = ["StateReads"]


class StateReads(Generic[ModelT]):
    """Reads of a shared state.

    Its content now and at a log position, its stored history, and its typed
    (schema) views.
    """

    _core: StateCore
    _policies: PolicyTable

    # -- reading ------------------------------------------------------------------------
    @property
    def token(self) -> VersionVector:
        """The current version (a Yjs state vector)."""
        return self._core.log.head_token

    @property
    def position(self) -> int:
        """The log position of the current version.

        How many change sets this state has integrated (merges and received
        updates). A branch remembers the position it forked at; :meth:`read_at`
        reads the state as it was at a position.
        """
        return self._core.log.head_seq

    @property
    def lock(self) -> threading.RLock:
        """The re-entrant lock that guards this state.

        Hold it to read the state together with something of your own in one
        consistent moment (a hub client reads its replica and its queue of
        unconfirmed merges so). Never hold it across an ``await`` or a slow call:
        every merge and update waits for it.
        """
        return self._core.lock

    @property
    def client_id(self) -> int:
        """This replica's Yjs client id."""
        return int(self._core.doc.client_id)

    @property
    def held_bytes(self) -> int:
        """Bytes of peers' updates held until what they build on arrives (0 normally).

        As Yjs does: an update whose structs of a client start past what the document
        holds of that client waits whole (:meth:`apply_update` returns ``pending=True``),
        and structs whose origins the document lacks stay pending; both are applied as
        soon as what is missing comes. A figure that stays above 0 names a peer whose
        earlier updates (or those of a peer it synced with elsewhere) never reached this
        state.
        """
        core = self._core
        return core.waiting.size + (len(core.held) if core.held is not None else 0)

    @property
    def policies(self) -> PolicyTable:
        """The conflict policies of this state."""
        return self._policies

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the whole state as plain Python data."""
        with self._core.lock:
            snapshot: dict[str, Any] = copy_value(self._core.mirror)
            return snapshot

    def read(self) -> tuple[dict[str, Any], VersionVector]:
        """``(snapshot, token)`` taken atomically."""
        with self._core.lock:
            return copy_value(self._core.mirror), self._core.log.head_token

    def get(self, path: Any, default: Any = None) -> Any:
        """The value at ``path`` (a copy), or ``default`` when absent."""
        key = parse_path(path)
        with self._core.lock:
            value = tree_get(self._core.mirror, key)
        return default if value is MISSING else copy_value(value)

    def __contains__(self, path: object) -> bool:
        with self._core.lock:
            return tree_get(self._core.mirror, parse_path(path)) is not MISSING

    def read_at(self, path: Any, position: int) -> Any:
        """A copy of the value ``path`` had at log ``position`` (see :attr:`position`).

        Returns:
            The value, or :data:`MISSING` when absent.

        Raises:
            StaleBase: a position older than the retained history.
        """
        return self._core.read_at(parse_path(path), position)

    def keys_at(self, position: int) -> set[str]:
        """Every top-level key that may have had a value at log ``position`` (a superset)."""
        return self._core.keys_at(position)

    def validate_base(self, base: VersionVector) -> None:
        """Raise :class:`UnknownBase`/:class:`StaleBase` if ``base`` cannot be judged."""
        with self._core.lock:
            self._core.log.seq_of(base)

    # -- durability and history (a state with a store) ----------------------------------------
    @property
    def store(self) -> StateStore | None:
        """The storage of a durable state (``None`` in memory)."""
        return self._core.store

    @property
    def epoch(self) -> int:
        """How many times the document was rebuilt from its content (durable states)."""
        return self._core.epoch

    def _reader(self, what: str = "history") -> StateStore:
        store = self._core.store
        if store is None:
            raise WrongType(
                f"{what} needs a durable state (SharedState.open(path)); this one is in memory",
                details={"reason": "in_memory"},
            )
        self._core.check_open()
        return store

    def history(self, **filters: Any) -> list[HistoryEntry]:
        """The recorded changes, oldest first.

        Filters: ``agent``, ``path``, ``since``, ``until``, ``limit``; see
        :meth:`crdt_state.journal.StateStore.history`. ``since`` and ``until`` take a unix
        time, a :class:`~datetime.datetime` (naive: local time), ``"10m"`` / ``"2h"`` /
        ``"1d"`` ago or an ISO date-time; anything else raises :class:`WrongType`.
        """
        return self._reader().history(**filters)

    def at(self, token: VersionVector) -> dict[str, Any]:
        """The snapshot as it was when the state had exactly ``token``."""
        return self._reader("at").at(token)

    def blame(self, path: Any) -> BlameEntry | None:
        """Who last changed ``path`` (writing it, an ancestor or a descendant), when and where."""
        return self._reader("blame").blame(parse_path(path))

    def conflicts(self, path: Any = None, since: object = None) -> list[ConflictRecord]:
        """Recorded conflicts and their resolutions, optionally for one path / since a time.

        ``since`` as for :meth:`history` (a unix time, a datetime, ``"10m"``, an ISO time).
        """
        where = parse_path(path) if path is not None else None
        return self._reader("conflicts").conflicts(where, as_time(since, "since"))

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
        with ``loop.call_soon_threadsafe``, say). From a listener of :meth:`subscribe`,
        "so far" includes the change being told (it is handed to the store first).
        """
        with self._core.lock:  # a change is told and recorded under one hold of the lock
            store = self._core.store
            ticket = store.last_ticket() if store is not None else 0
        if store is None or ticket == 0:
            callback(None)
            return
        store.on_durable(ticket, callback)

    async def awhen_durable(self) -> None:
        """Return once every change made so far is durable (:meth:`when_durable`, awaited).

        Raises:
            StorageError: one of them will never be stored.
        """
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.when_durable(settle_on_loop(done))
        await done

    def wait_durable(self, ticket: int | None) -> None:
        """Block until the change of ``ticket`` (from :meth:`apply_merge`) is durable.

        At once for ``None`` (in memory). Raises :class:`StorageError` when it never will be.
        """
        self._core.wait_durable(ticket)

    async def await_durable(self, ticket: int | None) -> None:
        """:meth:`wait_durable` for asyncio code (the event loop is not blocked)."""
        await self._core.await_durable(ticket)

    # -- typed states ----------------------------------------------------------------------------
    @property
    def schema(self) -> type[ModelT] | None:
        """The pydantic model of this state, if it has one."""
        typed = self._core.schema
        return cast("type[ModelT]", typed.model_type) if typed is not None else None

    def _typed(self) -> StateSchema:
        if self._core.schema is None:
            raise TypeError("this state has no schema")
        return self._core.schema

    def model(self) -> ModelT:
        """The state as a validated instance of its schema (``TypeError`` without one)."""
        return cast(ModelT, self._typed().to_model(self.snapshot()))

    def to_model(self, data: dict[str, Any]) -> ModelT:
        """``data`` (a snapshot of this state, or one like it) as an instance of the schema.

        Raises:
            TypeError: the state has no schema.
            SchemaError: ``data`` does not validate.
        """
        return cast(ModelT, self._typed().to_model(data))

    def json_schema(self) -> dict[str, Any]:
        """The schema's JSON schema, ready to hand to an LLM as a tool definition."""
        return self._typed().json_schema()

    def prepare_fields(self, values: BaseModel | Mapping[str, Any]) -> list[tuple[Path, Any]]:
        """The ``(path, prepared value)`` pairs :meth:`Branch.update` writes for ``values``.

        A typed state takes a model (its set fields) or a partial dict of fields
        (dotted paths allowed); an untyped state takes a dict of paths.

        Raises:
            TypeError: a model given to a state without schema.
            SchemaError: a value the schema refuses.
        """
        typed = self._core.schema
        if typed is not None:
            items = typed.partial_items(values)
        elif isinstance(values, Mapping):
            items = [(parse_path(k), v) for k, v in values.items()]
        else:
            raise TypeError("update() takes a dict on a state without schema")
        return [(path, self._core.prepare_value(path, v)) for path, v in items]
