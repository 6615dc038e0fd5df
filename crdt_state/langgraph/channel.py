"""SharedChannel: a LangGraph channel backed by a shared state.

Declared on a graph's state as ``Annotated[dict, SharedChannel(state)]``.
Each run of the graph gets its own copy of the channel (LangGraph builds one
per run from the checkpoint); every copy reads and merges into the same state.

Per superstep: nodes read the snapshot the channel took at the end of the
previous step (its *token* is the fork base of every node of the step); the
partial updates they return (:mod:`crdt_state.langgraph.updates`) are merged
one writer at a time, each judged against that token. A task started by a
``Send`` is the exception: its input was computed by a conditional edge from
the snapshot of the step *before* (plus the sending node's own writes), so its
writes are judged against that step's token; whatever was merged since,
by other runs or by other nodes of that step, is a conflict for the policies,
never overwritten. (The sending node's own writes count too: a counter
incremented both by a node and by the tasks it sends is counted twice, so
pass such counts through the ``Send`` instead.) Disjoint writes merge;
writes to overlapping paths (equal values included) go to the policies;
conflicts name the writing node (``worker#3`` for the fourth ``Send`` to
``worker``). Unresolved conflicts raise :class:`GraphConflictError` once every
writer of the step was tried. The channel then reads the state again, so the
next step sees everything merged meanwhile, by this run or any other.

The checkpoint of the channel is its snapshot and token: resuming a thread, or
reading an old checkpoint, gives the values that step saw.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Self

from langgraph.channels.base import BaseChannel
from langgraph.errors import InvalidUpdateError

from ..conflicts import Change, Conflict, ConflictError
from ..errors import CrdtStateError
from ..version import VersionVector
from .binding import Binding, request_id_for
from .updates import apply_changes, update_changes

__all__ = ["GraphConflictError", "SharedChannel"]

_PUSH = "__pregel_push"
_CHECKPOINT_TAG = "crdt_state.shared_channel"


class GraphConflictError(ConflictError, InvalidUpdateError):
    """Writes of one graph step to overlapping paths that no policy settled.

    A :class:`~crdt_state.ConflictError` (code ``"conflict"``; ``conflicts``
    holds every conflict, the unresolved ones naming their writing node) and a
    LangGraph ``InvalidUpdateError``. The writes that merged stay merged;
    ``nodes`` names the writers that were refused.
    """

    def __init__(
        self,
        message: str,
        *,
        conflicts: Sequence[Conflict],
        nodes: Sequence[str],
        retry: bool = False,
    ) -> None:
        unresolved = [c for c in conflicts if not c.resolved]
        super().__init__(
            message,
            conflicts=conflicts,
            retry=retry,
            path=unresolved[0].path if unresolved else None,
            details={"nodes": list(nodes)},
        )
        self.nodes: tuple[str, ...] = tuple(nodes)


@dataclass(frozen=True, slots=True)
class _Writer:
    agent: str
    task_id: str | None
    index: int
    sent: bool = False  # a task started by a ``Send``: its input came from the step before


class SharedChannel(BaseChannel[dict[str, Any], dict[str, Any], dict[str, Any]]):
    """A LangGraph channel whose value is a shared state, merged per superstep.

    Args:
        state: a ``SharedState``, or ``sync.connect_blocking(...)`` for a hub room
            (the channel merges synchronously, inside LangGraph's step loop).
        resolvers: conflict policies by path pattern, consulted before the state's.
        default: policy for conflicts no pattern matches (default: the state's).

    The value nodes read is a plain dict snapshot: treat it as read-only and
    return partial updates instead. A channel cannot re-run a node: a ``retry``
    policy surfaces as :class:`GraphConflictError` with ``retry`` true (use
    :func:`~crdt_state.langgraph.branch_node` for steps that retry).
    """

    __slots__ = (
        "_binding",
        "_default",
        "_detached",
        "_previous",
        "_reported",
        "_resolvers",
        "_snapshot",
        "_token",
    )

    def __init__(
        self,
        state: object,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> None:
        super().__init__(dict)
        self._binding = state if isinstance(state, Binding) else Binding(state)
        self._resolvers = dict(resolvers) if resolvers else None
        self._default = default
        self._snapshot: dict[str, Any] | None = None
        self._token: VersionVector | None = None
        self._reported: VersionVector | None = None  # the token LangGraph last saw change
        self._detached = False
        # the fork base of the step before: what the Sends made in that step were computed
        # from (a conditional edge reads a preview of the step's snapshot, see ``copy``)
        self._previous: VersionVector | None = None

    @property
    def state(self) -> Any:
        """The state this channel reads and merges into."""
        return self._binding.state

    @property
    def token(self) -> VersionVector | None:
        """The token of the snapshot nodes read (the fork base of the current step)."""
        return self._token

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SharedChannel) and other._binding.state is self._binding.state

    __hash__ = None  # type: ignore[assignment]

    @property
    def ValueType(self) -> type[dict[str, Any]]:
        """The type of the value nodes read."""
        return dict

    @property
    def UpdateType(self) -> type[dict[str, Any]]:
        """The type of the updates nodes return."""
        return dict

    # -- copies and checkpoints ------------------------------------------------------
    def _spawn(self) -> Self:
        twin = type(self)(self._binding, resolvers=self._resolvers, default=self._default)
        twin.key = self.key
        return twin

    def from_checkpoint(self, checkpoint: Any) -> Self:
        """A channel for one run: at the checkpoint's snapshot, or at the state's current one."""
        twin = self._spawn()
        if isinstance(checkpoint, Mapping) and checkpoint.get("kind") == _CHECKPOINT_TAG:
            twin._snapshot = dict(checkpoint["values"])
            twin._token = twin._reported = VersionVector.from_text(checkpoint["token"])
        else:
            twin._load()
        return twin

    def copy(self) -> Self:
        """A detached preview: updates apply to its snapshot only and merge nothing.

        LangGraph copies channels to show a node's own writes to its conditional
        edges; those writes are merged by the step itself, once.
        """
        twin = self._spawn()
        twin._snapshot = self._snapshot
        twin._token = self._token
        twin._detached = True
        return twin

    def checkpoint(self) -> dict[str, Any]:
        """The snapshot and its token (what the step saw), as plain data."""
        snapshot, token = self._current()
        return {"kind": _CHECKPOINT_TAG, "token": token.to_text(), "values": snapshot}

    # -- reading ------------------------------------------------------------------------
    def _load(self) -> None:
        """Read the state (a new snapshot and token)."""
        self._snapshot, self._token = self._binding.read()

    def _current(self) -> tuple[dict[str, Any], VersionVector]:
        if self._snapshot is None or self._token is None:
            self._load()
        assert self._snapshot is not None and self._token is not None
        return self._snapshot, self._token

    def get(self) -> dict[str, Any]:
        """The snapshot nodes of the current step read."""
        return self._current()[0]

    def is_available(self) -> bool:
        """Always: a shared state has a value (possibly ``{}``) from the start."""
        return True

    # -- writing ------------------------------------------------------------------------
    def update(self, values: Sequence[dict[str, Any]]) -> bool:
        """Merge the step's writes (one merge per writer), then read the state again.

        Returns True when the snapshot changed since LangGraph last saw it
        (merges of this step or others'; a channel read fresh from the state
        reports once, so every checkpoint holds its value).
        Every writer is tried. Then the first other error of a write (bad path,
        unsupported value, schema, :class:`MergeNotConfirmed`) is raised, its
        ``details`` naming the failed, refused and merged writers; else
        :class:`GraphConflictError` for unresolved conflicts.
        """
        if self._detached:
            return self._preview(values)
        if not values:
            self._previous = self._token
            if self._token is None or self._binding.token != self._token:
                self._load()
            return self._report()
        _, base = self._current()
        sent_base = self._previous if self._previous is not None else base
        self._previous = base
        writers = _writers(self.key, values)
        refused: list[tuple[str, ConflictError]] = []
        failed: list[tuple[str, CrdtStateError]] = []
        merged: list[str] = []
        for position, value in enumerate(values):
            writer = writers.get(id(value))
            agent = writer.agent if writer is not None else f"{self.key or 'channel'}#{position}"
            try:
                changes = update_changes(value)
                if not changes:
                    continue
                request_id = None
                if writer is not None and writer.task_id is not None:
                    request_id = request_id_for(writer.task_id, self.key, writer.index, changes)
                self._binding.commit(
                    changes,
                    sent_base if writer is not None and writer.sent else base,
                    agent,
                    resolvers=self._resolvers,
                    default=self._default,
                    request_id=request_id,
                )
                merged.append(agent)
            except ConflictError as exc:
                refused.append((agent, exc))
            except CrdtStateError as exc:  # every writer is still tried: disjoint ones land
                failed.append((agent, exc))
        self._load()
        self._report()
        if failed:
            raise _failure(failed, refused, merged)
        if refused:
            raise _refusal(refused, merged)
        return True

    def _report(self) -> bool:
        """True (a new channel version, so a new checkpoint value) when the snapshot moved."""
        changed = self._token != self._reported
        self._reported = self._token
        return changed

    def _preview(self, values: Sequence[dict[str, Any]]) -> bool:
        snapshot, _ = self._current()
        changes: list[Change] = []
        for value in values:
            changes.extend(update_changes(value))
        if changes:
            self._snapshot = apply_changes(snapshot, changes)
        return bool(values)


def _failure(
    failed: list[tuple[str, CrdtStateError]],
    refused: list[tuple[str, ConflictError]],
    merged: list[str],
) -> CrdtStateError:
    """The first failed writer's error (bad path, value, schema...), told the whole step.

    ``details``: ``node`` (its writer), ``failed`` (every writer that failed, with its
    error's code), ``refused`` (writers refused by a conflict) and ``merged`` (the writers
    whose writes landed: every writer was tried).
    """
    agent, first = failed[0]
    first.details.setdefault("node", agent)
    first.details["failed"] = [{"node": a, "code": e.code} for a, e in failed]
    first.details["refused"] = [a for a, _ in refused]
    first.details["merged"] = merged
    return first


def _refusal(refused: list[tuple[str, ConflictError]], merged: list[str]) -> GraphConflictError:
    conflicts = [c for _, exc in refused for c in exc.conflicts]
    nodes = [agent for agent, _ in refused]
    paths = sorted({".".join(c.path) for c in conflicts if not c.resolved})
    landed = f"the other {len(merged)} merged" if merged else "no other write of this step"
    return GraphConflictError(
        f"{len(nodes)} writer(s) of this step conflict at {', '.join(paths) or 'a stale base'}"
        f" (refused: {', '.join(nodes)}); {landed}",
        conflicts=conflicts,
        nodes=nodes,
        retry=any(exc.retry for _, exc in refused),
    )


def _writers(key: str, values: Sequence[Any]) -> dict[int, _Writer]:
    """Which task wrote each value, looked up in LangGraph's step loop (best effort).

    LangGraph hands a channel bare values; the tasks that wrote them are a
    local (``tasks``) of its ``apply_writes``, two frames up. When that is not
    found (another caller, another LangGraph version) writers get generic names.
    """
    wanted = {id(v) for v in values}
    frame: FrameType | None = sys._getframe(2)
    try:
        for _ in range(3):
            if frame is None:
                return {}
            tasks = frame.f_locals.get("tasks")
            if isinstance(tasks, (list, tuple)):
                return _match(key, tasks, wanted)
            frame = frame.f_back
        return {}
    finally:
        del frame


def _match(key: str, tasks: Sequence[Any], wanted: set[int]) -> dict[int, _Writer]:
    found: dict[int, _Writer] = {}
    for task in tasks:
        name = getattr(task, "name", None)
        if not isinstance(name, str):
            continue
        path: Sequence[Any] = getattr(task, "path", ())
        agent = name
        sent = len(path) >= 2 and path[0] == _PUSH and isinstance(path[1], int)
        if sent:
            agent = f"{name}#{path[1]}"
        task_id = getattr(task, "id", None)
        index = 0
        for write in getattr(task, "writes", ()):
            channel, value = write
            if channel == key and id(value) in wanted:
                found[id(value)] = _Writer(
                    agent, task_id if isinstance(task_id, str) else None, index, sent
                )
                index += 1
    return found
