"""Conflict policies: what to do when a branch and the state wrote one path.

A policy is any callable ``(Conflict) -> value``; the value returned becomes
the path's value (return :data:`MISSING` to delete the path). Built-ins:

- :func:`last_writer_wins`: the merging branch's value wins.
- :func:`first_writer_wins`: the value already in the state stays.
- :func:`maximum` / :func:`minimum`: the larger / smaller of the two.
- :func:`counter`: ``base + (current - base) + (incoming - base)``, so
  concurrent increments add up.
- :func:`union`: the current list followed by the incoming items it lacks,
  order kept, no duplicates.
- :func:`retry`: re-run the agent step on fresh state (see ``transact``).
- :func:`raise_conflict`: refuse the merge with :class:`ConflictError`.

A policy that cannot handle the values it is given (``counter`` on strings,
say) leaves the conflict unresolved, which refuses the merge.

Equal concurrent writes are not conflicts, except for policies that set the
attribute ``sees_equal_writes`` (``counter`` does): for them, two branches
that both changed a path to the same value are still two changes to combine.
Policies are attached to path patterns (see :mod:`crdt_state.paths`) in a
:class:`PolicyTable`; a non-callable value in place of a policy means
"resolve to exactly this value".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeAlias

from .conflicts import Conflict
from .paths import Path, Pattern, most_specific
from .values import MISSING, normalize

__all__ = [
    "Escalation",
    "Policy",
    "PolicyTable",
    "constant",
    "counter",
    "first_writer_wins",
    "last_writer_wins",
    "maximum",
    "minimum",
    "policy_name",
    "raise_conflict",
    "report_equal_writes",
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

    An absent value counts as 0.
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
    """The current list, then the incoming items it lacks; no duplicates, order kept."""
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


counter.sees_equal_writes = True  # type: ignore[attr-defined]
"""Two agents adding 1 to the same base both wrote ``base + 1``: that is two increments."""


def report_equal_writes(conflict: Conflict) -> NoReturn:
    """Refuse, and also see equal concurrent writes (so another party can combine them).

    A hub uses it for paths whose remote client holds a policy with
    ``sees_equal_writes`` (such as :func:`counter`) that the hub itself lacks.
    """
    raise Escalation(False, "reported to the merging client")


report_equal_writes.sees_equal_writes = True  # type: ignore[attr-defined]


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


def policy_name(policy: Policy) -> str:
    """A readable name for logs and audit records."""
    return getattr(policy, "__name__", None) or type(policy).__name__


def as_policy(policy: object) -> Policy:
    """``policy`` itself when callable, else a :func:`constant` of it."""
    if callable(policy):
        return policy
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
        self._rules: dict[Pattern, Policy] = {
            Pattern.parse(pattern): as_policy(policy)
            for pattern, policy in (resolvers or {}).items()
        }
        self.default: Policy = as_policy(default)
        self._parent = parent
        self._cache: dict[Path, Policy] = {}

    def overlay(
        self, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> PolicyTable:
        """A table whose rules (and default, when given) take precedence over this one's."""
        if not resolvers and default is None:
            return self
        return PolicyTable(resolvers, self.default if default is None else default, parent=self)

    def _lookup(self, path: Path) -> Policy | None:
        best = most_specific(self._rules, path)
        if best is not None:
            return self._rules[best]
        return self._parent._lookup(path) if self._parent is not None else None

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
            return conflict.resolve(conflict.resolution, name), escalation
        if value is not MISSING:
            value = normalize(value, conflict.path)
        return conflict.resolve(value, name), None
