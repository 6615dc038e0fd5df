"""Data that merges take and give: changes, conflicts, merge results, applied updates.

The names, one per concept:

- :class:`Change`: one edit an agent asks for (``set``/``delete``/``append`` a path);
  what a branch sends and :meth:`SharedState.commit` takes.
- :data:`WriteKind`: how a path was written (the same three words), everywhere.
- :class:`Conflict`: a path both sides wrote since the fork base, and its resolution.
- :class:`MergeResult`: what one merge did.
- :class:`StateUpdate`: one change the state integrated (a merge or a received
  update), as listeners receive it and a store records it.
- :class:`ConflictError` / :class:`RetryExhausted`: a merge refused for its conflicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .errors import CrdtStateError
from .paths import Path, format_path
from .values import MISSING, Missing, same
from .version import VersionVector

__all__ = [
    "UNRESOLVED",
    "Change",
    "Conflict",
    "ConflictError",
    "MergeResult",
    "RetryExhausted",
    "StateUpdate",
    "Unresolved",
    "WriteKind",
]

WriteKind = Literal["set", "delete", "append"]
"""How a path is written: stored (``set``), removed (``delete``), or extended (``append``)."""


class Unresolved:
    """The type of :data:`UNRESOLVED`."""

    _instance: Unresolved | None = None

    def __new__(cls) -> Unresolved:
        """The one instance (a singleton, compared with ``is``)."""
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNRESOLVED"

    def __bool__(self) -> bool:
        return False


UNRESOLVED = Unresolved()
"""The ``resolution`` of a conflict no policy settled."""


@dataclass(frozen=True, slots=True)
class Change:
    """One edit of a branch, as sent over the wire and to :meth:`SharedState.commit`.

    ``set`` stores ``value`` at ``path``; ``delete`` removes ``path``;
    ``append`` adds the items of the list ``value`` at the end of the list at
    ``path`` (creating it when absent).
    """

    kind: WriteKind
    path: Path
    value: Any = MISSING

    def to_dict(self) -> dict[str, Any]:
        """The change as JSON-ready data: ``kind``, ``path`` (a list), ``value`` unless a delete."""
        out: dict[str, Any] = {"kind": self.kind, "path": list(self.path)}
        if self.kind != "delete":
            out["value"] = self.value
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (Missing, Unresolved)):
        return {"$" + repr(value).lower(): True}
    return value


@dataclass(frozen=True, slots=True)
class Conflict:
    """A path the branch and the state both wrote since the fork base, whatever the values.

    Two writes to overlapping paths (equal, or one below the other) since the
    fork base always conflict, even when they wrote the same value: a 3-way
    merge cannot tell "both decided 1" from "both incremented 0". Such a
    conflict has :attr:`same_value` set, and the policy decides
    (:func:`~crdt_state.resolvers.accept_equal` keeps the value,
    :func:`~crdt_state.resolvers.counter` adds both increments).

    ``base`` is the value at the fork, ``current`` the state's value at merge
    time, ``incoming`` the branch's value; :data:`MISSING` stands for "absent".
    ``resolution`` is the value the policy chose (``MISSING`` = delete), or
    :data:`UNRESOLVED`; ``policy`` names the policy consulted.
    """

    path: Path
    base: Any
    current: Any
    incoming: Any
    current_agent: str | None
    incoming_agent: str
    resolution: Any = UNRESOLVED
    policy: str | None = None
    base_token: VersionVector | None = field(default=None, compare=False)
    current_token: VersionVector | None = field(default=None, compare=False)

    @property
    def same_value(self) -> bool:
        """True when the branch wrote exactly the value the state holds.

        Strict equality: ``True`` is not ``1``; two deletes are the same value.
        """
        return same(self.incoming, self.current)

    @property
    def resolved(self) -> bool:
        """True when a policy settled the conflict with a value (or a delete)."""
        return self.resolution is not UNRESOLVED

    def resolve(self, value: Any, policy: str | None = None) -> Conflict:
        """A copy with ``resolution`` set (``policy`` recorded when given)."""
        return replace(self, resolution=value, policy=policy or self.policy)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form; absent values are written ``{"$missing": true}``."""
        return {
            "path": list(self.path),
            "base": _jsonable(self.base),
            "current": _jsonable(self.current),
            "incoming": _jsonable(self.incoming),
            "same_value": self.same_value,
            "current_agent": self.current_agent,
            "incoming_agent": self.incoming_agent,
            "resolution": _jsonable(self.resolution),
            "policy": self.policy,
        }

    def __str__(self) -> str:
        same_value = " (same value)" if self.same_value else ""
        return (
            f"conflict at {format_path(self.path)}{same_value}: base={self.base!r} "
            f"current={self.current!r} ({self.current_agent}) incoming={self.incoming!r} "
            f"({self.incoming_agent}) -> {self.resolution!r}"
        )


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What a merge did.

    ``token`` is the state's version after the merge; ``applied`` the paths
    written; ``conflicts`` every conflict met, each with its resolution;
    ``fast_forward`` is true when nothing had changed since the fork base.
    ``value`` is what the agent step returned (for ``transact``), and
    ``attempts`` how many times it ran. ``pending`` is true for a remote
    merge queued while offline: it is sent, and judged, on reconnect; and for a
    peer's update kept until the clocks before it arrive (``apply_update``).
    ``rounds`` is how many times a remote merge was sent to the hub before it
    was applied (conflicts the client's policies settled are sent again).
    """

    token: VersionVector
    applied: tuple[Path, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    fast_forward: bool = True
    agent: str | None = None
    value: Any = None
    attempts: int = 1
    pending: bool = False
    rounds: int = 1


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """One change the state integrated, as :meth:`SharedState.subscribe` listeners get it.

    Also what a store records (:meth:`crdt_state.journal.StateStore.record`).

    Attributes:
        seq: the change's position in the state's log (1 = first change).
        update: a standard Yjs update holding exactly this change.
        token: the state's version after it.
        agent: who made it (the merging agent; for a received update, the
            ``agent`` given to :meth:`SharedState.apply_update`).
        paths: the paths written.
        origin: ``"local"`` for merges, ``"remote"`` for received updates.
        time: when it was integrated (``time.time()``).
        conflicts: the conflicts the merge met, resolved.
        request_id: the idempotency key of a :meth:`SharedState.commit`, if any.
        writer: the scope of ``request_id`` (the two make the request's key).
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


class ConflictError(CrdtStateError):
    """A merge met conflicts that its policies did not resolve.

    Nothing was applied. ``conflicts`` lists every conflict of the attempt;
    those whose ``resolution`` is still :data:`UNRESOLVED` are the cause.
    ``retry`` is true when a policy asked for the agent step to be re-run.
    """

    code = "conflict"

    def __init__(
        self,
        message: str,
        *,
        conflicts: Sequence[Conflict] = (),
        retry: bool = False,
        path: Sequence[str] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, path=path, details=details)
        self.conflicts: tuple[Conflict, ...] = tuple(conflicts)
        self.retry = retry

    def to_dict(self) -> dict[str, Any]:
        """The error's data, with its ``conflicts`` (as dicts) and ``retry``."""
        out = super().to_dict()
        out["conflicts"] = [c.to_dict() for c in self.conflicts]
        out["retry"] = self.retry
        return out


class RetryExhausted(ConflictError):
    """``transact`` ran out of attempts; carries the last attempt's conflicts."""

    code = "retry_exhausted"

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        conflicts: Sequence[Conflict] = (),
        path: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            message, conflicts=conflicts, retry=True, path=path, details={"attempts": attempts}
        )
        self.attempts = attempts
