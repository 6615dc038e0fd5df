"""Settling a merge the hub refused, with the client's own policies (pure logic).

Two cases reach the client:

- :func:`settle_refusal`: the hub found conflicts its policies did not settle
  (error ``conflict`` or ``retry``); the client's policies resolve them, and
  the merge is sent again with the resolved values, judged against the hub's
  token at the refusal.
- :func:`rejudge`: the hub could not take the merge's chain (error
  ``broken_chain``: an earlier merge it builds on was refused, or applied
  differently than the agent saw it). Once those earlier merges are settled,
  the client compares, for each path the merge sets or deletes, the value the
  agent saw (``seen``) with the hub's confirmed value now; where they differ,
  that is a conflict for the client's policies. The merge is then sent again
  without a chain, judged against the client's replica token.
  :func:`rejudge_merge` does this for a pending merge against the replica (also
  for ``stale_base``: a base older than the hub's retained history).

:func:`named_changes` lists the changes whose policy a hub can apply itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from crdt_state import MISSING, BrokenChain, Change, Conflict, SharedState
from crdt_state.planner import MergePlan
from crdt_state.resolvers import Escalation, PolicyTable, named_policy
from crdt_state.values import same
from sync.client._offline import PendingMerge
from sync.wire import protocol as p
from sync.wire.convert import conflict_from_record
from sync.wire.errors import RemoteError

__all__ = ["named_changes", "rejudge", "rejudge_merge", "settle_refusal", "substitute"]

Path = tuple[str, ...]


def settle_refusal(
    reply: p.MergeReply, ops: list[Change], table: PolicyTable
) -> tuple[list[Change], list[Conflict]]:
    """Resolve a refused merge's conflicts with ``table``.

    Returns the changes to send again (resolved values substituted) and the
    conflicts with their resolutions. Raises :class:`ConflictError` (``retry``
    set when a policy asked for it) or :class:`RemoteError` when the refusal
    was not about conflicts.
    """
    error = reply.error
    assert error is not None
    if error.code not in ("conflict", "retry"):
        raise RemoteError(error.code, error.message)
    settled: dict[Path, Any] = {}
    final: list[Conflict] = []
    escalated: list[Escalation] = []
    for record in reply.conflicts:
        conflict = conflict_from_record(record)
        if not conflict.resolved:
            conflict, escalation = table.resolve(conflict)
            if escalation is not None:
                escalated.append(escalation)
        final.append(conflict)
        if conflict.resolved:
            settled[conflict.path] = conflict.resolution
    _raise_if(escalated, final)
    return substitute(ops, settled), final


def rejudge(
    ops: list[Change],
    seen: Mapping[Path, Any],
    current: Callable[[Path], Any],
    table: PolicyTable,
    agent: str,
) -> tuple[list[Change], list[Conflict]]:
    """Judge a merge whose chain the hub could not take against the values it was built on.

    ``seen[path]`` is the value the agent saw at each path it sets or deletes
    (``MISSING``: absent); ``current(path)`` the hub's confirmed value now.
    Appends, and paths whose value is still what the agent saw, are kept.
    Elsewhere the difference is a :class:`Conflict` (``base`` = what the agent
    saw) for ``table``: its resolution replaces the change, and a resolution
    equal to the current value drops it. Returns the changes to send and the
    conflicts; raises :class:`ConflictError` when a policy does not settle one.
    """
    out: list[Change] = []
    conflicts: list[Conflict] = []
    escalated: list[Escalation] = []
    for op in ops:
        if op.kind == "append" or op.path not in seen:
            out.append(op)
            continue
        before, now = seen[op.path], current(op.path)
        if same(before, now):
            out.append(op)
            continue
        incoming = MISSING if op.kind == "delete" else op.value
        conflict = Conflict(
            path=op.path,
            base=before,
            current=now,
            incoming=incoming,
            current_agent=None,
            incoming_agent=agent,
        )
        resolved, escalation = table.resolve(conflict)
        conflicts.append(resolved)
        if escalation is not None:
            escalated.append(escalation)
        elif not same(resolved.resolution, now):
            out.append(_write(op.path, resolved.resolution))
    _raise_if(escalated, conflicts)
    return out, conflicts


def _raise_if(escalated: list[Escalation], conflicts: list[Conflict]) -> None:
    """Refuse the merge as the core refuses one: the plan's own :class:`ConflictError`."""
    if escalated:
        raise MergePlan([], conflicts, escalated, fast_forward=False).error()


def _write(path: Path, value: Any) -> Change:
    return Change("delete", path) if value is MISSING else Change("set", path, value)


def substitute(ops: list[Change], settled: Mapping[Path, Any]) -> list[Change]:
    """Replace each change in ``ops`` whose path ``settled`` gives a value for.

    Returns:
        ``ops`` with a write of the settled value (a delete for :data:`MISSING`)
        in place of the change at each settled path; the others unchanged.
    """
    return [_write(op.path, settled[op.path]) if op.path in settled else op for op in ops]


def rejudge_merge(
    merge: PendingMerge, table: PolicyTable, replica: SharedState
) -> tuple[list[Change], list[Conflict], dict[Path, Any]]:
    """Judge a refused ``merge`` again, against what ``replica`` holds now.

    Returns:
        The changes to send again (empty when every change settled to the value already
        there), the conflicts met, and the values the changes are judged on (the new
        ``seen``: if the hub refuses it as stale again, it can be judged again).

    Raises:
        BrokenChain: what the agent saw is not known, so it cannot be judged again.
        ConflictError: a conflict the client's policies did not settle.
    """
    if merge.seen is None:
        raise BrokenChain(
            "the hub refused this merge's chain or stale base, and what the agent saw is not known",
            details={"chain": list(merge.chain)},
        )
    ops, conflicts = rejudge(
        merge.ops, merge.seen, lambda path: replica.get(path, MISSING), table, merge.agent
    )
    seen = {op.path: replica.get(op.path, MISSING) for op in ops if op.kind != "append"}
    return ops, conflicts, seen


def named_changes(ops: list[Change], table: PolicyTable) -> tuple[tuple[int, str], ...]:
    """List the changes of ``ops`` whose policy in ``table`` a hub can apply itself.

    Returns:
        ``(change index, policy name)`` pairs, names from
        :data:`~crdt_state.resolvers.NAMED_POLICIES`.
    """
    named: list[tuple[int, str]] = []
    for index, op in enumerate(ops):
        name = named_policy(table.policy_for(op.path))
        if name is not None:
            named.append((index, name))
    return tuple(named)
