"""SharedState: the authoritative document of one shared state.

Agents fork branches from it and merge them back; other replicas exchange
standard Yjs updates with it. All mutations happen under one re-entrant lock,
so merges are atomic and many threads (and asyncio tasks) can fork and merge
concurrently. Every merge is written into the document by the state's own
Yjs client, so refused merges never leave gaps in anyone's clocks; which
agent made a change is kept in the change log.

``SharedState`` is the public face; its parts are plain functions over one
:class:`~crdt_state._core.StateCore` (lock, document, mirror, change log,
listeners, store), each in its own module: :mod:`crdt_state._merge` (the
planner judges, the core applies), :mod:`crdt_state._replication` (Yjs
updates from other replicas), :mod:`crdt_state._durable` (reopening from a
:class:`~crdt_state.journal.StateStore`, new epochs) and
:mod:`crdt_state._state_reads` (content, history, typed views),
:mod:`crdt_state._state_exchange` (Yjs updates, listeners), :mod:`crdt_state._state_args`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Self

from . import _durable, _merge
from ._core import StateCore
from ._sizes import HISTORY_BYTES
from ._state_args import check_agent, check_commit
from ._state_exchange import StateExchange
from ._state_reads import StateReads
from ._writes import apply_writes
from .branch import Branch
from .conflicts import Change, MergeResult, StateUpdate
from .journal import StateStore
from .model_type import ModelT
from .paths import Path
from .requests import RequestKey
from .resolvers import PolicyTable, raise_conflict
from .transact import Transacting
from .version import VersionVector

__all__ = ["SharedState", "StateUpdate"]


class SharedState(StateReads[ModelT], StateExchange, Transacting[ModelT]):
    """The authoritative, thread-safe state that branches fork from and merge into.

    Args:
        resolvers: conflict policies by path pattern (``{"calls": counter}``).
        default: policy for conflicts no pattern matches (``raise_conflict``; ``None``
            too, as for ``merge(default=None)``; a constant resolves every such conflict).
        history: how many change-log entries are kept for judging old fork bases.
        history_bytes: about how many bytes the kept entries may hold (the values
            they overwrote, kept for reading and judging old versions); past it the
            oldest entries go, whatever ``history`` says: a base older than the
            retained history is refused with :class:`StaleBase` (rebase and retry).
        client_id: the Yjs client id of this replica (random when omitted).
        schema: a pydantic model describing the state (see ``crdt_state.schema``):
            typed reads, validation of every write and merge, per-field policies.
        initialize: write the schema's defaults into an empty state (turn off
            for a replica that will receive its content from elsewhere).
        follower: a replica that mirrors an authority (a hub client's replica):
            it takes received updates as they are (the authority validated them:
            no schema or depth check) and never writes on its own, not even the
            tick that marks a received deletion (the authority ticks for it).
        check_depth: refuse received values deeper than ``values.MAX_DEPTH``
            (:class:`UnsupportedValue`, nothing applied); default: unless ``follower``.
    """

    def __init__(
        self,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object = raise_conflict,
        history: int = 10_000,
        history_bytes: int = HISTORY_BYTES,
        client_id: int | None = None,
        schema: type[ModelT] | None = None,
        initialize: bool = True,
        follower: bool = False,
        check_depth: bool | None = None,
    ) -> None:
        typed = None
        if schema is not None:
            from .schema import StateSchema  # pydantic is only imported for typed states

            typed = StateSchema(schema)
        core = StateCore(
            client_id=client_id,
            history=history,
            history_bytes=history_bytes,
            follower=follower,
            schema=typed,
            check_depth=check_depth,
        )
        self._core = core
        if typed is not None:
            base = PolicyTable(typed.policies())
            self._policies = PolicyTable(resolvers, default, parent=base)
            defaults = typed.defaults() if initialize else {}
            if defaults:
                changes = [Change("set", (k,), v) for k, v in defaults.items()]
                with core.lock:
                    apply_writes(core, changes, "schema", ())
        else:
            self._policies = PolicyTable(resolvers, default)

    # -- opening a stored state -----------------------------------------------------
    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, schema: type[ModelT] | None = None, **options: Any
    ) -> Self:
        """Create or reopen a state stored in the SQLite file at ``path``.

        Args:
            path: the file; created when missing (its directory must exist).
            schema: as the constructor's (``SharedState.open(path, schema=Triage)``: typed).
            options: the storage options of :meth:`crdt_state.storage.SqliteStore.open`
                (``durability``, ``keep_history``, ``keep_conflicts``,
                ``compact_document``, ``read_only``) and the constructor's. With
                ``read_only=True`` the file must exist; it is read without a lock,
                even while a writer (a hub) holds it, and every write raises
                :class:`~crdt_state.errors.ReadOnlyStore`.

        Raises:
            StorageError: a foreign, damaged, newer or already open file (untouched).
        """
        from .storage import STORE_OPTIONS, SqliteStore

        settings = {k: options.pop(k) for k in STORE_OPTIONS if k in options}
        return cls.open_store(SqliteStore.open(path, **settings), schema=schema, **options)

    @classmethod
    def open_store(
        cls, store: StateStore, *, schema: type[ModelT] | None = None, **options: Any
    ) -> Self:
        """Create or reopen the state ``store`` keeps (any :class:`StateStore`).

        A new store gets the state's first snapshot (schema defaults included);
        a store with content is replayed exactly (content and token), with a
        new client id (``client_id`` is refused if it already wrote there), and
        schema defaults are not written again. The store belongs to the state
        from then on (closed with it; closed here if opening fails).

        Args:
            store: the storage, freshly opened.
            schema: as the constructor's.
            options: the constructor's (``resolvers``, ``default``, ``history``,
                ``client_id``, ``initialize``).

        Raises:
            StorageError: the stored data is damaged, ``client_id`` is unsafe, or a
                ``read_only`` store holds nothing yet (``details["reason"]`` ``"missing"``).
        """
        state = _durable.open_store(cls, store, {**options, "schema": schema})
        store.on_epoch_due(state._start_epoch)  # kept weakly by the store
        return state

    def _start_epoch(self) -> bool:
        """The store asks for a new epoch (see :func:`crdt_state._durable.start_epoch`)."""
        return _durable.start_epoch(self._core)

    # -- branches and merges ------------------------------------------------------------
    def fork(self, agent: str) -> Branch[ModelT]:
        """A new branch for ``agent`` at the current version; O(1), no copy."""
        check_agent(agent)
        core = self._core
        with core.lock:
            if core.closed:
                core.check_open()
            return Branch(self, agent, core.log.head_seq, core.log.head_token)

    def ensure_open(self) -> None:
        """Raise unless the state takes writes.

        Raises:
            StateClosed: the durable state is closed.
            ReadOnlyStore: it was opened ``read_only``.
        """
        if self._core.closed or self._core.read_only:
            self._core.check_writable()

    def prepare(self, changes: Mapping[Any, Any] | Iterable[Change]) -> list[Change]:
        """A change set as this state would merge it.

        Paths parsed, values validated (schema included) and normalised, each path
        named once.

        ``changes`` is ``{path: value}`` (:data:`MISSING` deletes) or
        :class:`Change` objects. Raises what a merge of them would raise for a bad
        value or path (:class:`~crdt_state.errors.CrdtStateError` subclasses,
        ``TypeError`` for objects that are not changes); the state is not touched.
        """
        return _merge.prepare_changes(self._core, changes)

    def prepare_value(self, path: Path, value: Any) -> Any:
        """``value`` validated (schema included) and normalised for writing at ``path``."""
        return self._core.prepare_value(path, value)

    def prepare_items(self, path: Path, items: list[Any]) -> list[Any]:
        """``items`` validated and normalised for appending at ``path``."""
        return self._core.prepare_items(path, items)

    def merge_at(
        self,
        changes: list[Change],
        position: int,
        agent: str,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Merge prepared ``changes`` computed on the state at log ``position``.

        What :meth:`Branch.merge` calls (see it for the conflict rules): :meth:`apply_merge`,
        then a wait until the change is durable.
        """
        result, ticket = self.apply_merge(changes, position, agent, resolvers, default)
        self.wait_durable(ticket)
        return result

    async def amerge_at(
        self,
        changes: list[Change],
        position: int,
        agent: str,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """:meth:`merge_at` for asyncio code (the disk wait does not block the loop)."""
        result, ticket = self.apply_merge(changes, position, agent, resolvers, default)
        await self.await_durable(ticket)
        return result

    def apply_merge(
        self,
        changes: list[Change],
        position: int,
        agent: str,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> tuple[MergeResult, int | None]:
        """Judge and apply a merge without waiting for the disk: the result and its ticket.

        The ticket (``None`` in memory) is for :meth:`wait_durable` / :meth:`await_durable`.

        Raises:
            ConflictError: unresolved conflicts; nothing applied.
            StaleBase: ``position`` is older than the retained history.
        """
        table = self._policies.overlay(resolvers, default)
        return _merge.merge(self._core, changes, position, agent, table)

    def commit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
        request_id: int | None = None,
        writer: str | None = None,
        builds_on: Iterable[int] = (),
        wait: bool = True,
    ) -> MergeResult:
        """Merge changes computed from the state at ``base`` (optimistic concurrency).

        ``changes`` is ``{path: value}`` (a value of :data:`MISSING` deletes)
        or a sequence of :class:`Change`. Conflicts are judged against
        ``base`` exactly as for a branch; see :meth:`Branch.merge`.

        **Request identity.** ``request_id`` is an idempotency key scoped by
        ``writer`` (default: ``agent``): deduplication keys on the pair
        ``(writer, request_id)`` (a :class:`~crdt_state.requests.RequestKey`),
        never on the id alone, so two writers may use the same ids. A key this
        state already applied returns that merge's token and paths again and
        changes nothing, so a caller that lost the answer may safely send it
        again. The newest 100,000 applied keys (all writers together) are
        remembered, across reopening for a durable state, including merges
        that wrote nothing. A refused merge is not remembered.

        **Chains.** ``builds_on`` lists request ids of earlier merges of the
        same writer that ``changes`` were computed on top of, though ``base``
        does not include them (an agent that merges again before its earlier
        merges came back, like commits on a local branch). Conflicts are then
        judged against ``base`` plus those merges: the changes they made do not
        count as concurrent writes (an agent never conflicts with itself).
        Every id must name a remembered request of ``writer`` that was applied
        exactly as sent (without any conflict); otherwise
        :class:`~crdt_state.BrokenChain` is raised and nothing is applied.

        **Durability.** A durable state returns once the change is stored (per the
        store's ``durability``). With ``wait=False`` it returns as soon as the change
        is made and handed to the store, without blocking: the caller must not report
        the merge as done before :meth:`when_durable` said so (one wait can then cover
        many merges, as a hub judging a batch does).
        """
        result, ticket = self._commit(
            changes, base, agent, resolvers, default, request_id, writer, builds_on
        )
        if wait:
            self._core.wait_durable(ticket)
        return result

    async def acommit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
        request_id: int | None = None,
        writer: str | None = None,
        builds_on: Iterable[int] = (),
    ) -> MergeResult:
        """:meth:`commit` for asyncio code: a durable state's disk wait does not block the loop."""
        result, ticket = self._commit(
            changes, base, agent, resolvers, default, request_id, writer, builds_on
        )
        await self._core.await_durable(ticket)
        return result

    def _commit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str,
        resolvers: Mapping[Any, object] | None,
        default: object | None,
        request_id: int | None,
        writer: str | None,
        builds_on: Iterable[int],
    ) -> tuple[MergeResult, int | None]:
        """The shared part of :meth:`commit` and :meth:`acommit` (no durability wait)."""
        check_commit(changes, base, agent)
        self.ensure_open()
        ops = self.prepare(changes)
        scope = agent if writer is None else writer
        key = None if request_id is None else RequestKey(scope, request_id)
        table = self._policies.overlay(resolvers, default)
        return _merge.commit(self._core, ops, base, agent, table, key, scope, tuple(builds_on))

    # -- closing -----------------------------------------------------------------------------
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
        store = self._core.store
        if store is None:
            return
        with self._core.lock:  # a merge in progress finishes (and is stored) first
            self._core.closed = True
        store.close()
        with self._core.lock:
            self._core.stop_observing()  # frees the closed state's document

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SharedState {self.token} keys={len(self._core.mirror)}>"
