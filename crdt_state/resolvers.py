"""Conflict policies: what to do when a branch and the state wrote one path.

The conflict rule: any two writes to overlapping paths since the fork base
conflict, whatever the values. Two agents that both wrote ``1`` may have
agreed, or may both have incremented ``0``; only the policy of the path can
tell, so such a conflict reaches the policy too, flagged
:attr:`Conflict.same_value <crdt_state.conflicts.Conflict.same_value>`.

A policy is any callable ``(Conflict) -> value``; the value returned becomes
the path's value (return :data:`MISSING` to delete the path; a value equal to
the current one writes nothing). Built-ins:

- :func:`last_writer_wins`: the merging branch's value wins.
- :func:`first_writer_wins`: the value already in the state stays.
- :func:`maximum` / :func:`minimum`: the larger / smaller of the two.
- :func:`counter`: ``current + incoming - base``, so concurrent increments
  add up (two agents that each wrote ``base + 1`` give ``base + 2``).
- :func:`union`: the current list followed by the incoming items it lacks,
  order kept, no duplicates.
- :func:`accept_equal`: the same value on both sides is kept; different
  values refuse the merge.
- :func:`retry`: re-run the agent step on fresh state (see ``transact``).
- :func:`raise_conflict`: refuse the merge with :class:`ConflictError` (the default).

On a same-value conflict the built-ins do what their names say: the winner
policies, ``maximum``, ``minimum``, ``union`` and ``accept_equal`` keep that
value, ``counter`` adds both deltas, ``retry`` re-runs and ``raise_conflict``
refuses. For read-modify-write (``n = n + 1``) use ``counter`` or ``retry``;
``accept_equal`` is for writes that state a fact, where two agents finding
the same answer agree.

A policy that cannot handle the values it is given (``counter`` on strings,
say) leaves the conflict unresolved, which refuses the merge. Appends to one
list from both sides are not conflicts (both are kept) and never reach a
policy. Policies are attached to path patterns (see :mod:`crdt_state.paths`)
in a :class:`PolicyTable`; a non-callable value in place of a policy means
"resolve to exactly this value".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeAlias

from .conflicts import Conflict
from .errors import WrongType
from .paths import Path, Pattern, most_specific
from .values import MISSING, normalize

__all__ = [
    "NAMED_POLICIES",
    "Escalation",
    "Policy",
    "PolicyTable",
    "accept_equal",
    "constant",
    "counter",
    "first_writer_wins",
    "last_writer_wins",
    "maximum",
    "minimum",
    "named_policy",
    "policy_name",
    "raise_conflict",
    "retry",
    "union",
]

Policy: TypeAlias = Callable[[Conflict], Any]


class Escalation(Exception):
    """Raised by a policy that does not settle a conflict (internal signal)."""

    def __init__(self, retry: bool, reason: str = "") -> None:
        super().__init__(reason)
        self.retry = retry
        self.reason = reason


def last_writer_wins(conflict: Conflict) -> Any:
    """The merging branch's value wins (a delete stays a delete)."""
    return conflict.incoming


def first_writer_wins(conflict: Conflict) -> Any:
    """The value already in the state is kept."""
    return conflict.current


def _numbers(conflict: Conflict, name: str) -> list[int | float]:
    values = [v for v in (conflict.current, conflict.incoming) if v is not MISSING]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Escalation(False, f"{name} needs numbers, got {type(v).__name__}")
    return values


def maximum(conflict: Conflict) -> Any:
    """The larger of current and incoming (an absent side is ignored)."""
    values = _numbers(conflict, "maximum")
    return max(values) if values else MISSING


def minimum(conflict: Conflict) -> Any:
    """The smaller of current and incoming (an absent side is ignored)."""
    values = _numbers(conflict, "minimum")
    return min(values) if values else MISSING


def counter(conflict: Conflict) -> Any:
    """Both sides' deltas from the base, added: ``current + incoming - base``.

    Two agents that each wrote ``base + 1`` give ``base + 2``. An absent
    value counts as 0.
    """
    parts = []
    for v in (conflict.base, conflict.current, conflict.incoming):
        if v is MISSING:
            v = 0
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Escalation(False, f"counter needs numbers, got {type(v).__name__}")
        parts.append(v)
    base, current, incoming = parts
    return current + incoming - base


def _key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, separators=(",", ":"))


def union(conflict: Conflict) -> Any:
    """The current list, then the incoming items it lacks; no duplicates, order kept.

    Two equal lists give that list unchanged.
    """
    if conflict.same_value and isinstance(conflict.current, list):
        return conflict.current
    seen: set[str] = set()
    out = []
    for side in (conflict.current, conflict.incoming):
        if side is MISSING:
            continue
        if not isinstance(side, list):
            raise Escalation(False, f"union needs lists, got {type(side).__name__}")
        for item in side:
            key = _key(item)
            if key not in seen:
                seen.add(key)
                out.append(item)
    return out


def accept_equal(conflict: Conflict) -> Any:
    """The same value written on both sides is kept; different values stay unresolved.

    For writes that state a fact ("the ticket is a refund"), where two agents
    finding the same answer agree. Not for read-modify-write: two agents that
    both incremented ``0`` also agree on ``1`` (use :func:`counter` or
    :func:`retry` there).
    """
    if conflict.same_value:
        return conflict.current
    raise Escalation(False, "accept_equal refuses different values")


def retry(conflict: Conflict) -> NoReturn:
    """Ask for the agent step to be re-run on fresh state."""
    raise Escalation(True, "policy asks for a retry")


def raise_conflict(conflict: Conflict) -> NoReturn:
    """Refuse the merge with :class:`~crdt_state.errors.ConflictError` (the default)."""
    raise Escalation(False, "policy refuses conflicting writes")


class _Constant:
    def __init__(self, value: Any) -> None:
        self.value = normalize(value)
        self.__name__ = f"constant({self.value!r})"

    def __call__(self, conflict: Conflict) -> Any:
        return self.value


def constant(value: Any) -> Policy:
    """A policy that always resolves to ``value``."""
    return _Constant(value)


NAMED_POLICIES: Mapping[str, Policy] = {
    p.__name__: p
    for p in (
        last_writer_wins,
        first_writer_wins,
        maximum,
        minimum,
        counter,
        union,
        accept_equal,
    )
}
"""The built-ins a client may ask a hub to apply for it, by name: pure functions of
the conflict that settle it or refuse (``retry`` and ``raise_conflict`` are not among
them: they hand the conflict back to the agent, which the client does itself)."""


_BUILTIN_NAMES = frozenset({*NAMED_POLICIES, "retry", "raise_conflict", "constant"})


def named_policy(policy: Policy) -> str | None:
    """The name ``policy`` has in :data:`NAMED_POLICIES`, or ``None``."""
    name = getattr(policy, "__name__", None)
    if isinstance(name, str) and NAMED_POLICIES.get(name) is policy:
        return name
    return None


def policy_name(policy: Policy) -> str:
    """A readable name for logs and audit records."""
    return getattr(policy, "__name__", None) or type(policy).__name__


def as_policy(policy: object, where: Path | None = None) -> Policy:
    """``policy`` itself when callable, else a :func:`constant` of it.

    Args:
        policy: a function of the conflict, or the constant value to resolve to.
        where: the pattern it is given for (named in the error).

    Raises:
        WrongType: ``policy`` is a string naming a built-in policy (``"maximum"``):
            ambiguous, so refused with a hint (``resolvers.maximum`` for the
            policy, ``resolvers.constant("maximum")`` for that literal value).
    """
    if callable(policy):
        return policy
    if isinstance(policy, str) and policy in _BUILTIN_NAMES:
        raise WrongType(
            f"the resolver {policy!r} is a string naming a built-in policy: pass "
            f"resolvers.{policy} for the policy, or resolvers.constant({policy!r}) "
            "to resolve to that literal string",
            path=where,
            details={
                "given": policy,
                "hint": f"resolvers.{policy}",
                "literal": f"resolvers.constant({policy!r})",
            },
        )
    return constant(policy)


class PolicyTable:
    """Policies by path pattern, plus a default; the most specific pattern wins.

    A table made by :meth:`overlay` consults its own rules first (merge-time
    options beat rules given to the state, which beat schema annotations).
    """

    def __init__(
        self,
        resolvers: Mapping[Any, object] | None = None,
        default: object = raise_conflict,
        *,
        parent: PolicyTable | None = None,
    ) -> None:
        if resolvers is not None and not isinstance(resolvers, Mapping):
            raise WrongType(
                "resolvers must be a mapping {path pattern: policy}, "
                f"not {type(resolvers).__name__}",
                details={"resolvers": repr(resolvers)[:80]},
            )
        self._rules: dict[Pattern, Policy] = {}
        for pattern, policy in (resolvers or {}).items():
            parsed = Pattern.parse(pattern)
            self._rules[parsed] = as_policy(policy, parsed.keys)
        # None is no default policy, as for merge(default=None): conflicts are raised
        self.default: Policy = as_policy(raise_conflict if default is None else default)
        self._parent = parent
        self._cache: dict[Path, Policy] = {}
        self._last_overlay: tuple[object, PolicyTable] | None = None

    def overlay(
        self, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> PolicyTable:
        """A table whose rules (and default, when given) take precedence over this one's.

        Tables never change after construction, so an overlay with no rules of its
        own and the same default object as the last one is that same table (a hub
        overlays its default on every merge).
        """
        if not resolvers and default is None:
            return self
        if resolvers is None:
            last = self._last_overlay
            if last is not None and last[0] is default:
                return last[1]
            # this table's rules and parent with another default: the same lookups as a
            # child of this table, but no reference back to it (a cached child would be
            # a cycle, this table kept alive until a full garbage collection)
            table = PolicyTable(None, default, parent=self._parent)
            table._rules = self._rules
            self._last_overlay = (default, table)
            return table
        return PolicyTable(resolvers, self.default if default is None else default, parent=self)

    def _lookup(self, path: Path) -> Policy | None:
        best = most_specific(self._rules, path)
        if best is not None:
            return self._rules[best]
        return self._parent._lookup(path) if self._parent is not None else None

    def has_rule(self, path: Path) -> bool:
        """True when a pattern of this table (or a parent's) governs ``path``.

        Governs: its policy is not just the default.
        """
        return self._lookup(path) is not None

    def policy_for(self, path: Path) -> Policy:
        """The policy that governs ``path``."""
        found = self._cache.get(path)
        if found is None:
            found = self._lookup(path) or self.default
            if len(self._cache) < 4096:
                self._cache[path] = found
        return found

    def resolve(self, conflict: Conflict) -> tuple[Conflict, Escalation | None]:
        """Apply the governing policy.

        Returns the conflict with its resolution, or unchanged (``policy``
        recorded) together with the :class:`Escalation` the policy raised.
        Any other exception from a user policy propagates.
        """
        policy = self.policy_for(conflict.path)
        name = policy_name(policy)
        try:
            value = policy(conflict)
        except Escalation as escalation:
            # without its traceback: kept with the plan, whose frames the traceback holds,
            # it made a reference cycle that kept every caller's frame (and what they
            # refer to: rooms, connections) until a full garbage collection
            return conflict.resolve(conflict.resolution, name), escalation.with_traceback(None)
        if value is not MISSING:
            value = normalize(value, conflict.path)
        return conflict.resolve(value, name), None
