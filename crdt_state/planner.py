"""The merge planner: judge a change set against what the state did since its base (pure).

Given a branch's changes, the change-log entries after its fork base, the
state's current content (plain data) and the policy table, :func:`plan_merge`
decides what a merge writes: which changes go in as they are, which paths
conflict, how each conflict's policy settled it, and whether the merge must
be refused. No pycrdt, no locks, no I/O: ``SharedState._merge_now`` calls it
under the state lock and applies the plan; anything else that judges merges
(a hub, a test) can call it the same way.

The conflict rule: a change conflicts when an entry since the base wrote an
overlapping path (the same path, an ancestor or a descendant), whatever the
values. Equal writes conflict too (:attr:`Conflict.same_value` is then set);
the policy decides. The one exception: appends to one list from both sides
(nothing but appends at exactly that path) are both kept, no conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._entry import Entry
from ._entry_reads import overlaps, read_at
from .conflicts import Change, Conflict, ConflictError
from .errors import DuplicatePath, WrongType
from .paths import Path, format_path
from .resolvers import Escalation, PolicyTable
from .values import MAX_DEPTH, MISSING, check_depth, copy_value, same, tree_get
from .version import VersionVector

__all__ = ["MergePlan", "check_disjoint", "plan_merge", "writes_depth"]


@dataclass(slots=True)
class MergePlan:
    """What a merge writes, and why.

    ``writes`` are the changes to apply, in order (conflicting paths carry
    their resolution; a resolution equal to the current value, or a delete of
    an absent path, writes nothing and is left out). ``conflicts`` lists every
    conflict met, resolved or not; ``escalations`` the policies that did not
    settle theirs (the merge is then refused, see :meth:`error`).
    ``fast_forward`` is true when nothing was merged since the base.
    """

    writes: list[Change]
    conflicts: list[Conflict]
    escalations: list[Escalation]
    fast_forward: bool

    @property
    def refused(self) -> bool:
        """True when some conflict is unresolved: nothing may be applied."""
        return bool(self.escalations)

    def error(self) -> ConflictError:
        """The :class:`ConflictError` of a refused plan (``retry`` when every policy asked)."""
        retry = bool(self.escalations) and all(e.retry for e in self.escalations)
        unresolved = [c for c in self.conflicts if not c.resolved]
        paths = list(dict.fromkeys(format_path(c.path) for c in unresolved))
        where = ", ".join(repr(p) for p in paths[:5]) + (", ..." if len(paths) > 5 else "")
        declined = sorted(
            {c.policy for c in unresolved if c.policy not in (None, "raise_conflict")}
        )
        return ConflictError(
            f"{len(unresolved)} conflicting write(s) not resolved by policy"
            + (f" (paths {where})" if len(paths) > 1 else "")
            + (f" (declined by {', '.join(declined)})" if declined else "")
            + (" (retry requested)" if retry else ""),
            conflicts=self.conflicts,
            retry=retry,
            path=unresolved[0].path if unresolved else None,
        )


def plan_merge(
    ops: Sequence[Change],
    entries: Sequence[Entry],
    content: Mapping[str, Any],
    table: PolicyTable,
    *,
    agent: str,
    head: VersionVector,
    base_token: Callable[[], VersionVector],
    fast_forward: bool | None = None,
) -> MergePlan:
    """Judge ``ops`` (validated changes, at most one per path) against ``entries``.

    Args:
        ops: the branch's changes.
        entries: the change-log entries after the fork base, oldest first, or
            a sub-list of them that decides the same, such as
            :meth:`ChangeLog.for_merge <crdt_state._changelog.ChangeLog.for_merge>`
            gives (only entries that wrote or restored a path overlapping one
            of ``ops`` are ever consulted).
        content: the state's current content (read only; values are copied
            into the conflicts).
        table: the policies (merge-time rules first).
        agent: the merging agent.
        head: the state's current token (``Conflict.current_token``).
        base_token: gives the fork base's token; called only when a conflict
            is found (``Conflict.base_token``).
        fast_forward: whether nothing was merged since the base; by default,
            whether ``entries`` is empty (pass it when ``entries`` were
            narrowed to the ones that concern ``ops``).

    Returns the plan; a refused plan has ``escalations`` and must not be
    applied. Raises :class:`WrongType` for a change that cannot apply to the
    current content (writing below a scalar, appending to a non-list) and
    any exception a user policy raises; the content is never modified.
    """
    # no entry (a fast-forward, or nothing touching ops) cannot overlap anything
    found = overlaps([op.path for op in ops], entries) if entries else None
    plan = MergePlan([], [], [], not entries if fast_forward is None else fast_forward)
    forced: set[Path] = set()
    writes: Sequence[Change]
    if not found:
        writes = ops
    else:
        chosen: list[Change] = []
        writes = chosen
        base = base_token()
        for op in ops:
            overlap = found.get(op.path)
            if overlap is None or (
                op.kind == "append" and overlap.exact and overlap.kinds == {"append"}
            ):
                chosen.append(op)
                continue
            current = tree_get(content, op.path)
            before = read_at(current, op.path, entries)
            conflict = Conflict(
                path=op.path,
                base=copy_value(before),
                current=copy_value(current),
                incoming=copy_value(_incoming(op, before)),
                current_agent=overlap.agent,
                incoming_agent=agent,
                base_token=base,
                current_token=head,
            )
            resolved, escalation = table.resolve(conflict)
            plan.conflicts.append(resolved)
            if escalation is not None:
                plan.escalations.append(escalation)
            elif resolved.resolution is MISSING:
                chosen.append(Change("delete", op.path))
                forced.add(op.path)
            elif not same(resolved.resolution, current):
                chosen.append(Change("set", op.path, resolved.resolution))
                forced.add(op.path)
        if plan.escalations:
            return plan
    # deleting what is already absent writes nothing (and is not "applied")
    for op in writes:
        if op.kind != "delete" or tree_get(content, op.path) is not MISSING:
            plan.writes.append(op)
    _check_shapes(plan.writes, forced, content)
    return plan


def _incoming(op: Change, base: Any) -> Any:
    """The value the branch gives ``op.path`` (an append extends the base's list)."""
    if op.kind == "set":
        return op.value
    if op.kind == "delete":
        return MISSING
    prefix = base if isinstance(base, list) else []
    return [*prefix, *op.value]


def _check_shapes(writes: list[Change], forced: set[Path], content: Mapping[str, Any]) -> None:
    """Refuse changes that cannot apply to ``content`` (:class:`WrongType`).

    Paths whose value a policy chose (``forced``) replace whatever is there.
    """
    for op in writes:
        if op.path in forced:
            continue
        node: Any = content
        for i, key in enumerate(op.path[:-1]):
            node = node.get(key, MISSING) if isinstance(node, dict) else MISSING
            if node is MISSING:
                break
            if not isinstance(node, dict):
                raise WrongType(
                    f"cannot write below a {type(node).__name__} value",
                    path=op.path[: i + 1],
                    details={"write_path": list(op.path)},
                )
        if op.kind == "append":
            current = tree_get(content, op.path)
            if current is not MISSING and not isinstance(current, list):
                raise WrongType(
                    f"cannot append to a {type(current).__name__} value",
                    path=op.path,
                    details={"value": current},
                )


def check_disjoint(ops: Sequence[Change]) -> None:
    """Refuse a change set that names one place twice (:class:`DuplicatePath`).

    Twice means the same path, or a path and one inside it (``"d"`` and ``"d.e"``):
    one of the two writes would silently undo the other, whichever came last.
    """
    seen: set[Path] = set()
    for op in ops:
        if op.path in seen:
            raise DuplicatePath(
                "a change set names one path twice: write each path once per merge",
                path=op.path,
            )
        seen.add(op.path)
    for op in ops:
        path = op.path
        for i in range(1, len(path)):
            if path[:i] in seen:
                raise DuplicatePath(
                    f"a change set writes {format_path(path[:i])!r} and {format_path(path)!r} "
                    "inside it: one would undo the other; write the outer value whole, "
                    "or only the inner paths",
                    path=path,
                    details={"paths": [format_path(path[:i]), format_path(path)]},
                )


def writes_depth(writes: Sequence[Change]) -> int:
    """The depth of the deepest write (:func:`~crdt_state.values.depth_of`).

    Raises :class:`~crdt_state.errors.UnsupportedValue` when one goes past
    :data:`~crdt_state.values.MAX_DEPTH`. Scalars at short paths cost no walk.
    """
    depth = 0
    for op in writes:
        if isinstance(op.value, (dict, list)) or len(op.path) > MAX_DEPTH:
            level = check_depth(op.path, op.value)
        else:
            level = len(op.path)
        if level > depth:
            depth = level
    return depth
