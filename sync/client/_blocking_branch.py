"""The branch of a blocking remote state (:class:`BlockingBranch`), for threaded code.

A :class:`~sync.client.remote.RemoteBranch` driven through its owner's private event
loop (:class:`~sync.client.blocking.BlockingRemote`): reads and edits are local and
immediate, ``merge()`` blocks until the hub answers.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

from pydantic import BaseModel

from crdt_state import Change, MergeResult, SharedState, VersionVector
from crdt_state.model_type import ModelT
from sync.client._overlay import Overlay
from sync.client.branch import RemoteBranch

__all__ = ["BlockingBranch", "LoopRunner"]

T = TypeVar("T")


class LoopRunner(Protocol):
    """What a blocking branch needs of its owner: run a coroutine on its loop, wait."""

    def _call(self, coro: Coroutine[Any, Any, T]) -> T: ...


class BlockingBranch(Generic[ModelT]):
    """A remote branch whose :meth:`merge` blocks until the hub answers.

    Reading and editing are local and immediate, exactly as on the
    :class:`~sync.client.branch.RemoteBranch` it wraps (:attr:`branch`).
    """

    def __init__(self, owner: LoopRunner, branch: RemoteBranch[ModelT]) -> None:
        self._owner = owner
        self.branch = branch

    # -- identity ----------------------------------------------------------------------
    @property
    def agent(self) -> str:
        """The agent that owns this branch."""
        return self.branch.agent

    @property
    def base(self) -> VersionVector:
        """The replica's token at the fork."""
        return self.branch.base

    @property
    def status(self) -> str:
        """``"open"``, ``"merged"`` or ``"discarded"``."""
        return self.branch.status

    @property
    def state(self) -> SharedState[ModelT]:
        """The replica this branch was forked from."""
        return self.branch.state

    @property
    def overlay(self) -> Overlay:
        """The agent's unconfirmed merges this branch reads on top of its base."""
        return self.branch.overlay

    @property
    def result(self) -> MergeResult | None:
        """The result of the merge once merged."""
        return self.branch.result

    @property
    def dirty(self) -> bool:
        """True when the branch has changes to merge."""
        return self.branch.dirty

    # -- reading -----------------------------------------------------------------------
    def get(self, path: Any, default: Any = None) -> Any:
        """The branch's value at ``path`` (a copy), or ``default`` when absent."""
        return self.branch.get(path, default)

    def snapshot(self) -> dict[str, Any]:
        """The whole state as this branch sees it."""
        return self.branch.snapshot()

    def model(self) -> ModelT:
        """The branch's view as an instance of the schema (``TypeError`` without one)."""
        return self.branch.model()

    def changed_paths(self) -> tuple[tuple[str, ...], ...]:
        """The paths this branch changed (root-most)."""
        return self.branch.changed_paths()

    def changes(self) -> tuple[tuple[str, ...], ...]:
        """Deprecated name of :meth:`changed_paths`."""
        return self.branch.changed_paths()

    def as_changes(self) -> list[Change]:
        """The branch's changes, as a merge sends them."""
        return self.branch.as_changes()

    def ops(self) -> list[Change]:
        """Another name of :meth:`as_changes`."""
        return self.branch.as_changes()

    def __getitem__(self, key: str) -> Any:
        return self.branch[key]

    def __contains__(self, path: object) -> bool:
        return path in self.branch

    # -- writing -----------------------------------------------------------------------
    def set(self, path: Any, value: Any) -> None:
        """Write ``value`` at ``path`` (see :meth:`crdt_state.Branch.set`)."""
        self.branch.set(path, value)

    def delete(self, path: Any) -> None:
        """Remove ``path`` (see :meth:`crdt_state.Branch.delete`)."""
        self.branch.delete(path)

    def append(self, path: Any, *items: Any) -> None:
        """Add ``items`` at the end of the list at ``path`` (created when absent)."""
        self.branch.append(path, *items)

    def extend(self, path: Any, items: Iterable[Any]) -> None:
        """Like :meth:`append`, with the items as one iterable."""
        self.branch.extend(path, items)

    def update(self, values: BaseModel | Mapping[str, Any]) -> None:
        """Write every field given (see :meth:`crdt_state.Branch.update`)."""
        self.branch.update(values)

    def __setitem__(self, key: str, value: Any) -> None:
        self.branch[key] = value

    def __delitem__(self, key: str) -> None:
        del self.branch[key]

    def rebase(self) -> None:
        """Move the fork base to the replica's current version, replaying own edits."""
        self.branch.rebase()

    def discard(self) -> None:
        """Drop the branch's changes."""
        self.branch.discard()

    # -- merging -----------------------------------------------------------------------
    def merge(
        self, *, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> MergeResult:
        """Send the branch to the hub and wait for the outcome (see ``RemoteBranch.amerge``).

        Raises:
            ConflictError: conflicts the policies did not settle.
            BrokenChain: an earlier merge of the agent that this one builds on failed.
            RemoteError: the hub refused the merge for another reason.
        """
        return self._owner._call(self.branch.amerge(resolvers=resolvers, default=default))

    def __repr__(self) -> str:
        return "<Blocking" + repr(self.branch)[1:]

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.branch.discard()
        elif self.branch.status == "open":
            self.merge()
