"""SharedState: the authoritative document of one shared state.

Agents fork branches from it and merge them back; other replicas exchange
standard Yjs updates with it. All mutations happen under one re-entrant lock,
so merges are atomic and many threads (and asyncio tasks) can fork and merge
concurrently. Every merge is written into the document by the state's own
Yjs client, so refused merges never leave gaps in anyone's clocks; which
agent made a change is kept in the change log.

This module owns the core: reading, forking, committing, applying a merge
(judged by :func:`crdt_state.planner.plan_merge`, written in one document
transaction, all or nothing: see :mod:`crdt_state.rollback`), the change log
entries and listeners. ``SharedState`` takes the rest from mixins, each in
its own module: :mod:`crdt_state.replication` (Yjs updates to and from other
replicas), :mod:`crdt_state.durable` (storage, history, durability waits) and
:mod:`crdt_state.typed` (schema accessors and the write hooks).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pycrdt import Doc, Map

from . import document as ydoc
from .changelog import ChangeLog, Entry, TruncateTo, WriteKind, read_at
from .conflicts import Change, Conflict, MergeResult
from .durable import DurableMixin
from .errors import INTERRUPTS, CrdtStateError, WrongType
from .paths import Path, parse_path
from .planner import check_disjoint, plan_merge, writes_depth
from .replication import ReplicationMixin, join_updates
from .requests import RequestKey, RequestMemory
from .resolvers import PolicyTable, raise_conflict
from .retry import Retry
from .rollback import roll_back, undo_record, write_failed
from .transact import arun_transaction, run_transaction
from .typed import TypedMixin
from .values import MISSING, copy_value, tree_delete, tree_get, tree_set
from .version import VersionVector

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .branch import Branch
    from .schema import StateSchema
    from .storage import Store

__all__ = ["SharedState", "StateUpdate"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """What listeners of :meth:`SharedState.subscribe` receive for each change.

    ``update`` is a standard Yjs update holding exactly this change; ``paths``
    the paths written; ``origin`` is ``"local"`` for merges and ``"remote"``
    for updates received with :meth:`SharedState.apply_update`. A merge made
    by :meth:`SharedState.commit` with a ``request_id`` carries it and its
    ``writer`` (the two make the request's key).
    """

    seq: int
    update: bytes
    token: VersionVector
    agent: str | None
    paths: tuple[Path, ...]
    origin: str
    time: float
    conflicts: tuple[Conflict, ...] = ()
    request_id: int | None = None
    writer: str | None = None


Listener = Callable[[StateUpdate], None]


class Journal(Protocol):
    """Where a durable state records changes (see ``crdt_state.storage``).

    ``record`` is called under the state lock, in order; ``wait`` after the
    lock is released, and returns once the change is durable.
    """

    def record(self, change: StateUpdate) -> int: ...

    def wait(self, ticket: int) -> None: ...


class AsyncJournal(Journal, Protocol):
    """A journal that can also report durability by callback (for asyncio callers).

    ``on_durable(ticket, done)`` calls ``done(None)`` once the ticket is
    durable, or ``done(error)`` if it never will be; from any thread.
    """

    def on_durable(self, ticket: int, done: Callable[[BaseException | None], None]) -> None: ...


class SharedState(ReplicationMixin, DurableMixin, TypedMixin):
    """The authoritative, thread-safe state that branches fork from and merge into.

    Args:
        resolvers: conflict policies by path pattern (``{"calls": counter}``).
        default: policy for conflicts no pattern matches (``raise_conflict``).
        history: how many change-log entries are kept for judging old fork bases.
        client_id: the Yjs client id of this replica (random when omitted).
        schema: a pydantic model describing the state (see ``crdt_state.schema``):
            typed reads, validation of every write and merge, per-field policies.
        initialize: write the schema's defaults into an empty state (turn off
            for a replica that will receive its content from elsewhere).
    """

    def __init__(
        self,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object = raise_conflict,
        history: int = 10_000,
        client_id: int | None = None,
        schema: type[BaseModel] | None = None,
        initialize: bool = True,
    ) -> None:
        self._doc: Doc[Any] = Doc(client_id=client_id) if client_id is not None else Doc()
        self._root = self._doc.get(ydoc.ROOT, type=Map)
        self._meta = self._doc.get(ydoc.META_ROOT, type=Map)
        self._lock = threading.RLock()
        self._mirror: dict[str, Any] = {}
        self._log = ChangeLog(VersionVector(), limit=history)
        self._listeners: list[Listener] = []
        self._updates: list[bytes] = []
        self._update_sub: Any = None
        self._journal: Journal | None = None
        # A pure mirror of another state (a hub client's replica) must never write
        # on its own: the authority ticks for it (see ``_tick``).
        self._tick_remote = True
        self._validate_updates = True  # a schema checks updates from other replicas
        # Set once the document has been handed to anyone else (updates out or in,
        # listeners): from then on it must keep its identity (see _reset_document).
        self._shared = False
        self._requests = RequestMemory()
        self._closed = False  # a closed durable state takes no writes (see close())
        # at least as deep as any value in the state (see ``values.MAX_DEPTH``): bounds the
        # depth of values received from other replicas without reading the document
        self._depth_mark = 0
        self._held: bytes | None = None  # received structs Yjs keeps pending (replication)
        self.epoch = 0
        """How many times the document was rebuilt from its content (durable states)."""
        self._store: Store | None = None
        self._schema: StateSchema | None = None
        if schema is not None:
            from .schema import StateSchema

            self._schema = StateSchema(schema)
            base = PolicyTable(self._schema.policies())
            self._policies = PolicyTable(resolvers, default, parent=base)
            if initialize:
                defaults = self._schema.defaults()
                if defaults:
                    self._apply_local(
                        [Change("set", (k,), v) for k, v in defaults.items()], "schema", ()
                    )
        else:
            self._policies = PolicyTable(resolvers, default)

    # -- reading -------------------------------------------------------------
    @property
    def token(self) -> VersionVector:
        """The current version (a Yjs state vector)."""
        return self._log.head_token

    @property
    def client_id(self) -> int:
        """This replica's Yjs client id."""
        return int(self._doc.client_id)

    @property
    def policies(self) -> PolicyTable:
        """The conflict policies of this state."""
        return self._policies

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the whole state as plain Python data."""
        with self._lock:
            snapshot: dict[str, Any] = copy_value(self._mirror)
            return snapshot

    def read(self) -> tuple[dict[str, Any], VersionVector]:
        """``(snapshot, token)`` taken atomically."""
        with self._lock:
            return copy_value(self._mirror), self._log.head_token

    def get(self, path: Any, default: Any = None) -> Any:
        """The value at ``path`` (a copy), or ``default`` when absent."""
        key = parse_path(path)
        with self._lock:
            value = tree_get(self._mirror, key)
        return default if value is MISSING else copy_value(value)

    def __contains__(self, path: object) -> bool:
        with self._lock:
            return tree_get(self._mirror, parse_path(path)) is not MISSING

    # -- branches -----------------------------------------------------------
    def fork(self, agent: str) -> Branch:
        """A new branch for ``agent`` at the current version; O(1), no copy."""
        from .branch import Branch

        if not isinstance(agent, str) or not agent:
            raise TypeError("agent must be a non-empty str")
        with self._lock:
            if self._closed:
                self._check_open()
            return Branch(self, agent, self._log.head_seq, self._log.head_token)

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
        """
        result, ticket = self._commit_now(
            changes, base, agent, resolvers, default, request_id, writer, builds_on
        )
        self._settle(ticket)
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
        result, ticket = self._commit_now(
            changes, base, agent, resolvers, default, request_id, writer, builds_on
        )
        await self._asettle(ticket)
        return result

    def _commit_now(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str,
        resolvers: Mapping[Any, object] | None,
        default: object | None,
        request_id: int | None,
        writer: str | None = None,
        builds_on: Iterable[int] = (),
    ) -> tuple[MergeResult, int | None]:
        """The shared part of :meth:`commit` and :meth:`acommit` (no durability wait)."""
        if self._closed:
            self._check_open()
        ops = self._ops_from(changes)
        scope = agent if writer is None else writer
        key = None if request_id is None else RequestKey(scope, request_id)
        chain = tuple(builds_on)
        with self._lock:
            done = self._requests.result(key)
            if done is not None:  # answered once the original is durable too
                return done, self._store.last_ticket() if self._store is not None else None
            seq = self._log.seq_of(base)
            targets = {op.path: op.kind == "append" for op in ops}
            if chain:  # the chain's own changes, and what they overwrote, are part of the base
                mine = self._requests.chain_keys(scope, chain)
                entries, moved = self._log.for_chain(
                    seq, targets, base, mine, self._requests.tokens_of
                )
            else:  # only the entries that concern ops (see ChangeLog.for_merge)
                entries = self._log.for_merge(seq, targets, base)
                moved = self._log.moved(seq, base)
            result, ticket = self._merge_now(
                ops,
                seq,
                agent,
                resolvers,
                default,
                entries=entries,
                fast_forward=not moved,
                request_id=key,
            )
            if key is not None and (result.conflicts or not result.applied):
                ticket = self._remember_request(key, result, ticket)
            return result, ticket

    def _remember_request(
        self, key: RequestKey, result: MergeResult, ticket: int | None
    ) -> int | None:
        """Remember a request that met conflicts or wrote nothing (under the lock).

        A merge that wrote something is remembered (and journaled) with its
        change; this records whether it met conflicts, and remembers merges
        that wrote nothing, which have no change to journal them: a durable
        state stores them on their own. Returns the ticket to wait for.
        """
        clean = not result.conflicts
        self._requests.remember(key, result.token, result.applied, clean=clean)
        if not result.applied and self._store is not None:
            return self._store.remember_request(key, result.token, self._log.head_seq, clean)
        return ticket

    def _ops_from(self, changes: Mapping[Any, Any] | Iterable[Change]) -> list[Change]:
        items: Iterable[Change]
        if isinstance(changes, Mapping):
            items = [
                Change("delete", parse_path(p)) if v is MISSING else Change("set", parse_path(p), v)
                for p, v in changes.items()
            ]
        else:
            items = changes
        ops: list[Change] = []
        for op in items:
            if not isinstance(op, Change):
                raise TypeError(f"changes must be Change objects, got {type(op).__name__}")
            path = parse_path(op.path)
            if op.kind == "set":
                ops.append(Change("set", path, self._prepare(path, op.value)))
            elif op.kind == "delete":
                ops.append(Change("delete", path))
            elif op.kind == "append":
                if not isinstance(op.value, (list, tuple)):
                    raise WrongType("append takes a list of items", path=path)
                ops.append(Change("append", path, self._prepare_items(path, list(op.value))))
            else:
                raise CrdtStateError(f"unknown change kind {op.kind!r}", path=path)
        check_disjoint(ops)
        return ops

    # -- merging --------------------------------------------------------------
    def _read_at(self, path: Path, seq: int) -> Any:
        """A copy of the value ``path`` had at log position ``seq``."""
        with self._lock:
            current = tree_get(self._mirror, path)
            if seq != self._log.head_seq:
                current = read_at(current, path, self._log.for_reading(seq, path))
            return copy_value(current)

    def _read_at_keys(self, seq: int) -> set[str]:
        """Every top-level key that may have had a value at log position ``seq``."""
        with self._lock:
            keys = set(self._mirror)
            keys.update(self._log.keys_since(seq))
            return keys

    def _merge_now(
        self,
        ops: list[Change],
        base_seq: int,
        agent: str,
        resolvers: Mapping[Any, object] | None,
        default: object | None,
        *,
        entries: list[Entry] | None = None,
        fast_forward: bool | None = None,
        request_id: RequestKey | None = None,
    ) -> tuple[MergeResult, int | None]:
        """Judge and apply a merge under the lock; returns the result and its journal ticket.

        The judging is :func:`crdt_state.planner.plan_merge`, on ``entries``
        (and ``fast_forward``) when given, else on the log's entries after
        ``base_seq`` that concern ``ops`` (:meth:`ChangeLog.for_merge`); a
        refused plan raises :class:`ConflictError` and changes nothing. A
        ``request_id`` (the request's key) is remembered with the change (and
        journaled with it).
        """
        table = self._policies.overlay(resolvers, default)
        ticket: int | None = None
        with self._lock:
            if self._closed:
                self._check_open()
            if entries is None:
                fast_forward = base_seq == self._log.head_seq
                targets = {} if fast_forward else {op.path: op.kind == "append" for op in ops}
                entries = self._log.for_merge(base_seq, targets)
            head = self._log.head_token
            plan = plan_merge(
                ops,
                entries,
                self._mirror,
                table,
                agent=agent,
                head=head,
                base_token=lambda: self._log.token_at(base_seq),
                fast_forward=fast_forward,
            )
            if plan.refused:
                if self._store is not None:  # the conflict audit log keeps refusals too
                    self._store.audit(plan.conflicts, head)
                raise plan.error()
            conflicts = tuple(plan.conflicts)
            self._check_plan(plan.writes)
            if not plan.writes:
                if conflicts and self._store is not None:
                    self._store.audit(conflicts, head)
                empty = MergeResult(
                    token=head, conflicts=conflicts, fast_forward=plan.fast_forward, agent=agent
                )
                return empty, None
            entry, change = self._apply_local(plan.writes, agent, conflicts, request_id)
            if request_id is not None:
                self._requests.remember(request_id, entry.token, tuple(entry.writes))
            if self._journal is not None and change is not None:
                ticket = self._journal.record(change)
        result = MergeResult(
            token=entry.token,
            applied=tuple([op.path for op in plan.writes]),
            conflicts=conflicts,
            fast_forward=plan.fast_forward,
            agent=agent,
        )
        return result, ticket

    def _apply_local(
        self,
        plan: list[Change],
        agent: str | None,
        conflicts: tuple[Conflict, ...],
        request_id: RequestKey | None = None,
    ) -> tuple[Entry, StateUpdate | None]:
        """Write ``plan`` into the document and the mirror in one transaction, all or nothing.

        Every write is checked against :data:`~crdt_state.values.MAX_DEPTH`
        first (:class:`UnsupportedValue`, nothing touched). If a write still
        fails half-way, every path written so far is restored in the same
        transaction (see :mod:`crdt_state.rollback`); that transaction's update
        (the partial operations and their compensation, no net change) is
        logged as an entry that writes nothing, sent to listeners and
        journaled, so replicas and the file stay identical to this document;
        then :class:`WriteFailed` is raised (``KeyboardInterrupt`` and
        friends are re-raised as they are, after the rollback).
        """
        depth = writes_depth(plan)  # validated before the document is touched
        undo: list[tuple[Path, Any]] = []
        writes: dict[Path, WriteKind] = {}
        created = False
        failure: BaseException | None = None
        failed_at: Path | None = None
        rolled_back = True
        self._updates.clear()
        with self._doc.transaction(origin=agent):
            try:
                for op in plan:
                    failed_at = op.path
                    if op.kind == "delete":
                        before = tree_get(self._mirror, op.path)
                        if before is MISSING:
                            continue
                        undo.append((op.path, before))
                        ydoc.doc_delete(self._root, op.path)
                        tree_delete(self._mirror, op.path)
                        writes[op.path] = "delete"
                        continue
                    current = tree_get(self._mirror, op.path) if op.kind == "append" else MISSING
                    if isinstance(current, list):
                        undo.append((op.path, TruncateTo(len(current))))
                        ydoc.doc_extend(self._root, op.path, op.value)
                        current.extend(copy_value(op.value))
                        writes[op.path] = "append"
                    else:
                        record = undo_record(self._mirror, op.path)
                        undo.append(record)
                        if op.kind == "append":
                            ydoc.doc_extend(self._root, op.path, op.value)
                        else:
                            ydoc.doc_set(self._root, op.path, op.value)
                        tree_set(self._mirror, op.path, copy_value(op.value), force=True)
                        # a list written where there was none is an append to an empty list:
                        # recorded so, it reads the same as when replayed or received elsewhere
                        created_list = isinstance(op.value, list) and record[1] is MISSING
                        writes[op.path] = "append" if created_list else op.kind
                    created = True
                failed_at = None
                if writes and not created:
                    self._tick()
            except BaseException as exc:  # a pycrdt panic is a BaseException
                failure = exc
                rolled_back = roll_back(self._doc, self._mirror, undo)
            # read inside the open transaction: no second transaction (saves ~1 us)
            state = self._doc.get_state()
        if failure is not None:
            self._record_failed_write(agent, undo, rolled_back, state)
            if isinstance(failure, INTERRUPTS):
                raise failure
            raise write_failed(failure, failed_at, agent, rolled_back) from failure
        if depth > self._depth_mark:
            self._depth_mark = depth
        return self._record(
            agent, writes, undo, "local", conflicts, state=state, request_id=request_id
        )

    def _record_failed_write(
        self, agent: str | None, undo: list[tuple[Path, Any]], rolled_back: bool, state: bytes
    ) -> None:
        """Log (and journal) the transaction of a failed write if it reached the document.

        Rolled back, it writes nothing: an entry with no writes keeps the log's
        token equal to the document's. Otherwise the paths it touched are
        logged as written, with their values before.
        """
        if VersionVector.from_state(state) == self._log.head_token:
            self._updates.clear()  # nothing reached the document
            return
        writes: dict[Path, WriteKind] = {} if rolled_back else {p: "set" for p, _ in undo}
        _, change = self._record(agent, writes, [] if rolled_back else undo, "local", state=state)
        if self._journal is not None and change is not None:
            self._journal.record(change)

    def _tick(self) -> None:
        """Advance this replica's clock (a write to the meta root).

        Deletions alone add no operations to a Yjs document; without a tick,
        the versions before and after a deletion would be equal tokens.
        """
        self._meta["tick"] = self._log.head_seq + 1

    def _record(
        self,
        agent: str | None,
        writes: dict[Path, WriteKind],
        undo: list[tuple[Path, Any]],
        origin: str,
        conflicts: tuple[Conflict, ...] = (),
        update: bytes | None = None,
        state: bytes | None = None,
        request_id: RequestKey | None = None,
    ) -> tuple[Entry, StateUpdate | None]:
        """Log the change just written; tell listeners and return it as a :class:`StateUpdate`.

        The :class:`StateUpdate` (and its update bytes) is only built when someone
        listens or a journal records it; otherwise ``None`` is returned. ``state``
        is the document's state vector when the caller already has it.
        """
        token = VersionVector.from_state(self._doc.get_state() if state is None else state)
        entry = self._log.append(agent, token, writes, undo, origin=origin, request=request_id)
        if not self._listeners and self._journal is None:
            self._updates.clear()
            return entry, None
        if update is None:
            update = (
                b"".join(self._updates) if len(self._updates) == 1 else join_updates(self._updates)
            )
        self._updates.clear()
        change = StateUpdate(
            seq=entry.seq,
            update=update,
            token=token,
            agent=agent,
            paths=tuple(writes),
            origin=origin,
            time=entry.time,
            conflicts=conflicts,
            request_id=None if request_id is None else request_id.request_id,
            writer=None if request_id is None else request_id.writer,
        )
        for listener in list(self._listeners):
            listener(change)
        return entry, change

    # -- transactions with retry -------------------------------------------------
    def transact(
        self,
        fn: Callable[[Branch], T],
        *,
        agent: str,
        retry: Retry | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Run ``fn(branch)`` on a fresh branch and merge it; re-run on a retry.

        A conflict whose policy is ``resolvers.retry`` (or a base too old to
        judge) re-runs ``fn`` on fresh state after a jittered backoff, up to
        ``retry.attempts`` runs, then raises :class:`RetryExhausted`. Any
        exception from ``fn`` discards the branch and propagates. The result's
        ``value`` is what ``fn`` returned.
        """
        return run_transaction(
            self.fork, fn, agent=agent, retry=retry, resolvers=resolvers, default=default
        )

    async def atransact(
        self,
        fn: Callable[[Branch], Awaitable[T] | T],
        *,
        agent: str,
        retry: Retry | None = None,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """The asyncio form of :meth:`transact`; ``fn`` may be async or plain."""
        return await arun_transaction(
            self.fork, fn, agent=agent, retry=retry, resolvers=resolvers, default=default
        )

    # -- listeners ------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(StateUpdate)`` after every change, in order, under the lock.

        Returns a function that removes the listener. Listeners must be quick
        and must not call back into the state's mutating methods.
        """
        with self._lock:
            if self._update_sub is None:
                self._update_sub = self._doc.observe(self._on_transaction)
            self._listeners.append(listener)
            self._shared = True

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def _on_transaction(self, event: Any) -> None:
        self._updates.append(bytes(event.update))

    def validate_base(self, base: VersionVector) -> None:
        """Raise :class:`UnknownBase`/:class:`StaleBase` if ``base`` cannot be judged."""
        with self._lock:
            self._log.seq_of(base)

    def __repr__(self) -> str:
        return f"<SharedState {self.token} keys={len(self._mirror)}>"
