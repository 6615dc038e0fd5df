"""Merging into a state: the planner judges, the core applies, the store audits.

:func:`merge` takes prepared changes computed at a log position and:

1. collects the change-log entries after that position that concern them
   (:meth:`ChangeLog.for_merge`), unless the caller already did (a chain of
   requests, see :func:`commit`);
2. has :func:`crdt_state.planner.plan_merge` judge them (pure: writes,
   conflicts with resolutions, refusals);
3. audits the conflicts of a merge that writes nothing through the store
   interface, and raises the plan's :class:`ConflictError` when it is refused;
4. checks the writes against the schema and applies them
   (:func:`crdt_state._writes.apply_writes`), then hands the change to the store.

Everything runs under the core's lock; the wait for the disk is the caller's
(after the lock is released): each function returns a ticket for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._changelog import Entry
from ._core import StateCore
from ._writes import apply_writes
from .conflicts import Change, Conflict, MergeResult
from .errors import CrdtStateError, RequestReused, WrongType
from .paths import parse_path
from .planner import MergePlan, check_disjoint, plan_merge
from .requests import RequestKey
from .resolvers import PolicyTable
from .values import MISSING
from .version import VersionVector

__all__ = ["commit", "merge", "prepare_changes"]


def prepare_changes(core: StateCore, changes: Mapping[Any, Any] | Iterable[Change]) -> list[Change]:
    """A change set as ``core`` would merge it (see :meth:`SharedState.prepare`)."""
    items: Iterable[Change]
    if type(changes) is not list and isinstance(changes, Mapping):
        items = [
            Change("delete", parse_path(p)) if v is MISSING else Change("set", parse_path(p), v)
            for p, v in changes.items()
        ]
    else:
        items = changes
    ops: list[Change] = []
    for op in items:
        if not isinstance(op, Change):
            raise WrongType(
                "changes are {path: value} or Change objects, not a sequence of "
                f"{type(op).__name__}",
                details={"item": repr(op)[:80]},
            )
        path = parse_path(op.path)
        if op.kind == "set":
            value = core.prepare_value(path, op.value)
            # unchanged (a scalar, a tuple path): the change itself, not a copy of it
            same = value is op.value and path is op.path and type(op) is Change
            ops.append(op if same else Change("set", path, value))
        elif op.kind == "delete":
            ops.append(Change("delete", path))
        elif op.kind == "append":
            if not isinstance(op.value, (list, tuple)):
                raise WrongType("append takes a list of items", path=path)
            ops.append(Change("append", path, core.prepare_items(path, list(op.value))))
        else:
            raise CrdtStateError(f"unknown change kind {op.kind!r}", path=path)
    if len(ops) > 1:
        check_disjoint(ops)
    return ops


def _judge(
    core: StateCore,
    ops: list[Change],
    base_seq: int,
    agent: str,
    table: PolicyTable,
    entries: list[Entry] | None,
    fast_forward: bool | None,
) -> MergePlan:
    """The planner's verdict on ``ops`` made at ``base_seq`` (under the lock)."""
    log = core.log
    if entries is None:
        fast_forward = base_seq == log.head_seq
        targets = {} if fast_forward else {op.path: op.kind == "append" for op in ops}
        entries = log.for_merge(base_seq, targets)
    return plan_merge(
        ops,
        entries,
        core.mirror,
        table,
        agent=agent,
        head=log.head_token,
        base_token=lambda: log.token_at(base_seq),
        fast_forward=fast_forward,
    )


def _audit(core: StateCore, conflicts: tuple[Conflict, ...], token: VersionVector) -> None:
    """Keep the conflicts of a merge that wrote nothing in the store's audit log."""
    if conflicts and core.store is not None:
        core.store.audit(conflicts, token)


def merge(
    core: StateCore,
    ops: list[Change],
    base_seq: int,
    agent: str,
    table: PolicyTable,
    *,
    entries: list[Entry] | None = None,
    fast_forward: bool | None = None,
    request: RequestKey | None = None,
) -> tuple[MergeResult, int | None]:
    """Judge and apply a merge; returns the result and the store's ticket for it.

    Args:
        core: the state's core.
        ops: prepared changes (see :func:`prepare_changes`).
        base_seq: the log position the changes were computed at.
        agent: who merges.
        table: the policies, merge-time rules first.
        entries: the entries to judge against, when the caller chose them
            (with ``fast_forward``); else those after ``base_seq`` concerning ``ops``.
        fast_forward: whether nothing was merged since the base (with ``entries``).
        request: the request's key, remembered (and stored) with the change.

    Raises:
        ConflictError: the plan is refused; nothing changed.
        StateClosed: the state is closed.
    """
    with core.lock:
        if core.closed or core.read_only or core.telling:
            core.check_writable()
        plan = _judge(core, ops, base_seq, agent, table, entries, fast_forward)
        conflicts = tuple(plan.conflicts)
        if plan.refused:  # the conflict audit log keeps refusals too
            _audit(core, conflicts, core.log.head_token)
            raise plan.error()
        core.check_plan(plan.writes)
        if not plan.writes:
            head = core.log.head_token
            _audit(core, conflicts, head)
            empty = MergeResult(
                token=head, conflicts=conflicts, fast_forward=plan.fast_forward, agent=agent
            )
            return empty, None
        entry, change = apply_writes(core, plan.writes, agent, conflicts, request)
        if request is not None:
            core.requests.remember(request, entry.token, tuple(entry.writes))
        ticket = core.store_change(change)
    result = MergeResult(
        token=entry.token,
        applied=tuple([op.path for op in plan.writes]),
        conflicts=conflicts,
        fast_forward=plan.fast_forward,
        agent=agent,
    )
    return result, ticket


def commit(
    core: StateCore,
    ops: list[Change],
    base: VersionVector,
    agent: str,
    table: PolicyTable,
    request: RequestKey | None,
    writer: str,
    chain: tuple[int, ...],
) -> tuple[MergeResult, int | None]:
    """:meth:`SharedState.commit` without the wait: requests, chains, then :func:`merge`.

    A request key already applied returns that merge's result again (ticket:
    the newest, so the answer waits until the original is durable too).
    ``chain`` names request ids of ``writer`` that the changes build on.
    """
    with core.lock:
        done = core.requests.result(request)
        if done is not None:
            _same_request(request, done, ops)
            return done, core.store.last_ticket() if core.store is not None else None
        log = core.log
        seq = log.seq_of(base)
        targets = {op.path: op.kind == "append" for op in ops}
        if chain:  # the chain's own changes, and what they overwrote, are part of the base
            mine = core.requests.chain_keys(writer, chain)
            entries, moved = log.for_chain(seq, targets, base, mine, core.requests.tokens_of)
        else:  # only the entries that concern ops (see ChangeLog.for_merge)
            entries = log.for_merge(seq, targets, base)
            moved = log.moved(seq, base)
        result, ticket = merge(
            core,
            ops,
            seq,
            agent,
            table,
            entries=entries,
            fast_forward=not moved,
            request=request,
        )
        if request is not None and (result.conflicts or not result.applied):
            ticket = _remember_request(core, request, result, ticket)
        return result, ticket


def _same_request(key: RequestKey | None, done: MergeResult, ops: list[Change]) -> None:
    """Refuse a merge that reuses an applied request key for other paths (pure).

    A re-send writes the paths the first one applied (a policy may have dropped some);
    a path it did not send means another merge under the same key.

    Raises:
        RequestReused: with the key, the paths applied first and those sent now.
    """
    sent = {op.path for op in ops}
    if key is None or all(path in sent for path in done.applied):
        return
    raise RequestReused(
        "this writer's request id was applied already, by a merge of other paths: two "
        "clients share a writer id (copies of one local file?); give each its own file",
        details={
            "writer": key.writer,
            "request_id": key.request_id,
            "applied": [list(p) for p in done.applied],
            "paths": sorted(list(p) for p in sent),
        },
    )


def _remember_request(
    core: StateCore, key: RequestKey, result: MergeResult, ticket: int | None
) -> int | None:
    """Remember a request that met conflicts or wrote nothing (under the lock).

    A merge that wrote something is remembered (and stored) with its change;
    this records whether it met conflicts, and remembers merges that wrote
    nothing, which have no change to store them: the store keeps them on
    their own. Returns the ticket to wait for.
    """
    clean = not result.conflicts
    core.requests.remember(key, result.token, result.applied, clean=clean)
    if not result.applied and core.store is not None:
        return core.store.remember_request(key, result.token, core.log.head_seq, clean)
    return ticket
