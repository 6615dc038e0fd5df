"""What a remote agent edits: a branch of its replica that also sees its unconfirmed merges.

:class:`RemoteBranch` offers the public API of :class:`crdt_state.Branch`, by composition
(it uses only public methods of the branches it wraps):

- keys that none of the agent's unconfirmed merges wrote are read and edited on a
  :class:`~crdt_state.Branch` of the replica (O(1) to fork, nothing copied);
- keys that some did (the *overlay*, frozen at fork time) are read and edited on a
  branch of a small scratch state holding those keys as the agent sees them: the
  replica's values at the fork, with the overlay's changes applied. It is made the
  first time such a key is touched.

Merging sends the changes of both to the hub, with the fork-base token and the overlay
(the merge's chain); see :meth:`~sync.client.remote.RemoteState.acommit`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Generic, Protocol

from pydantic import BaseModel

from crdt_state import (
    MISSING,
    Branch,
    BranchClosed,
    Change,
    CrdtStateError,
    MergeResult,
    SharedState,
    VersionVector,
    parse_path,
)
from crdt_state.branch import MergeOnExit
from crdt_state.model_type import ModelT
from crdt_state.values import same
from sync.client._offline import PendingMerge
from sync.client._overlay import Overlay, RemoteToken

__all__ = ["RemoteBranch", "RemoteToken"]


class BranchOwner(Protocol[ModelT]):
    """What a :class:`RemoteBranch` needs from the remote state it was forked from."""

    @property
    def replica(self) -> SharedState[ModelT]: ...

    def fork(self, agent: str | None = None) -> RemoteBranch[ModelT]: ...

    def _view_of(self, key: str, base_seq: int, overlay: Overlay) -> Any: ...

    def _start_merge(
        self,
        ops: list[Change],
        base: VersionVector,
        agent: str,
        resolvers_: Mapping[Any, object] | None,
        default: object | None,
    ) -> tuple[PendingMerge, asyncio.Future[MergeResult] | None]: ...

    async def _outcome(
        self, merge: PendingMerge, future: asyncio.Future[MergeResult] | None
    ) -> MergeResult: ...


class RemoteBranch(MergeOnExit, Generic[ModelT]):
    """A branch of a remote room: reads and edits locally, merges through the hub.

    It reads the replica at its fork base with the agent's own unconfirmed merges of
    that moment applied on top (:attr:`overlay`), so an agent sees its own writes even
    before the hub has them, offline too. Not thread-safe by itself (one agent uses it).

    Args:
        owner: the remote state it was forked from.
        branch: a branch of ``owner.replica``, forked at replica position ``base_seq``.
        base_seq: the replica's change-log position at the fork.
        overlay: the agent's unconfirmed merges at the fork.
    """

    def __init__(
        self,
        owner: BranchOwner[ModelT],
        branch: Branch[ModelT],
        base_seq: int,
        overlay: Overlay | None = None,
    ) -> None:
        self._owner = owner
        self._main = branch
        self._base_seq = base_seq
        self._overlay = overlay or Overlay()
        self._side: Branch[ModelT] | None = None  # on the scratch state of the overlay's keys
        self._status = "open"
        self._result: MergeResult | None = None
        # the merge handed to the outbox, and its future: a cancelled amerge (a timeout)
        # waits for this same merge when called again, instead of sending it twice
        self._started: tuple[PendingMerge, asyncio.Future[MergeResult] | None] | None = None

    # -- identity ------------------------------------------------------------------------
    @property
    def agent(self) -> str:
        """The agent that owns this branch."""
        return self._main.agent

    @property
    def base(self) -> VersionVector:
        """The replica's confirmed token at the fork (the branch's revision token)."""
        return self._main.base

    @property
    def state(self) -> SharedState[ModelT]:
        """The replica this branch was forked from."""
        return self._owner.replica

    @property
    def overlay(self) -> Overlay:
        """The agent's unconfirmed merges this branch reads on top of its base."""
        return self._overlay

    @property
    def status(self) -> str:
        """``"open"``, ``"merged"`` or ``"discarded"``."""
        return self._status

    @property
    def result(self) -> MergeResult | None:
        """The result of the merge once merged."""
        return self._result

    @property
    def dirty(self) -> bool:
        """True when the branch has changes to merge."""
        return self._main.dirty or (self._side is not None and self._side.dirty)

    # -- which branch holds a key --------------------------------------------------------
    def _for(self, path: tuple[str, ...]) -> Branch[ModelT]:
        if path[0] not in self._overlay.keys:
            return self._main
        if self._side is None:
            self._side = self._scratch_branch()
        return self._side

    def _scratch_branch(self) -> Branch[ModelT]:
        """A branch of a scratch state holding the overlay's keys as the agent sees them."""
        replica = self._owner.replica
        scratch = SharedState(schema=replica.schema, initialize=False)
        values = {
            key: value
            for key in sorted(self._overlay.keys)
            if (value := self._owner._view_of(key, self._base_seq, self._overlay)) is not MISSING
        }
        if values:
            scratch.commit({(key,): value for key, value in values.items()}, scratch.token, "view")
        return scratch.fork(self.agent)

    def _writable(self) -> None:
        if self._status != "open":
            raise BranchClosed(
                f"branch of {self.agent!r} is {self._status}",
                details={"agent": self.agent, "status": self._status},
            )

    # -- reading -------------------------------------------------------------------------
    def get(self, path: Any, default: Any = None) -> Any:
        """The branch's value at ``path`` (a copy), or ``default`` when absent."""
        key = parse_path(path)
        return self._for(key).get(key, default)

    def snapshot(self) -> dict[str, Any]:
        """The whole state as this branch sees it (base, own queued merges, own edits)."""
        snapshot = self._main.snapshot()
        if self._overlay.keys:
            for key in self._overlay.keys:
                snapshot.pop(key, None)
            snapshot.update(self._for((next(iter(self._overlay.keys)),)).snapshot())
        return snapshot

    def model(self) -> ModelT:
        """The branch's view as an instance of the schema (``TypeError`` without one)."""
        return self._owner.replica.to_model(self.snapshot())

    def __getitem__(self, key: str) -> Any:
        return self._for(parse_path((key,)))[key]

    def __contains__(self, path: object) -> bool:
        key = parse_path(path)
        return key in self._for(key)

    # -- writing -------------------------------------------------------------------------
    def set(self, path: Any, value: Any) -> None:
        """Write ``value`` at ``path`` (see :meth:`crdt_state.Branch.set`)."""
        self._writable()
        key = parse_path(path)
        self._for(key).set(key, value)

    def delete(self, path: Any) -> None:
        """Remove ``path`` (see :meth:`crdt_state.Branch.delete`)."""
        self._writable()
        key = parse_path(path)
        self._for(key).delete(key)

    def append(self, path: Any, *items: Any) -> None:
        """Add ``items`` at the end of the list at ``path`` (created when absent)."""
        self.extend(path, items)

    def extend(self, path: Any, items: Iterable[Any]) -> None:
        """Like :meth:`append`, with the items as one iterable."""
        self._writable()
        key = parse_path(path)
        self._for(key).extend(key, items)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set((key,), value)

    def __delitem__(self, key: str) -> None:
        self.delete((key,))

    def update(self, values: BaseModel | Mapping[str, Any]) -> None:
        """Write every field given (see :meth:`crdt_state.Branch.update`).

        Every value is checked before the branch changes; on error nothing is written.
        """
        self._writable()
        keys = self._overlay.keys
        if isinstance(values, Mapping):
            items = [(parse_path(k), v) for k, v in values.items()]
            if not any(path[0] in keys for path, _ in items):
                self._main.update(values)
                return
        else:
            fields = values.model_fields_set
            if keys.isdisjoint(fields):
                self._main.update(values)
                return
            dumped = values.model_dump(include=fields)
            items = [((name,), v) for name, v in dumped.items() if not same(self.get(name), v)]
        for path, value in items:  # checked first, as a branch does, then written
            self._owner.replica.prepare({path: value})
        for path, value in items:
            self.set(path, value)

    # -- changes -------------------------------------------------------------------------
    def changed_paths(self) -> tuple[tuple[str, ...], ...]:
        """The paths this branch changed (root-most; a changed map covers its keys)."""
        side = self._side.changed_paths() if self._side is not None else ()
        return (*self._main.changed_paths(), *side)

    def changes(self) -> tuple[tuple[str, ...], ...]:
        """Deprecated name of :meth:`changed_paths` (as on :class:`crdt_state.Branch`)."""
        return self.changed_paths()

    def as_changes(self) -> list[Change]:
        """The branch's changes as :class:`~crdt_state.Change` objects (what a merge sends)."""
        side = self._side.as_changes() if self._side is not None else []
        return [*self._main.as_changes(), *side]

    def ops(self) -> list[Change]:
        """Another name of :meth:`as_changes` (as on :class:`crdt_state.Branch`)."""
        return self.as_changes()

    # -- merging -------------------------------------------------------------------------
    def merge(self, **options: Any) -> MergeResult:
        """Not available: a remote branch merges through the hub, asynchronously."""
        raise TypeError("a remote branch merges with 'await branch.amerge()' or 'async with'")

    async def amerge(
        self, *, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> MergeResult:
        """Send the branch to the hub; see :meth:`RemoteState.acommit` for the outcome.

        While offline this returns at once (after letting the event loop run once, so
        the connection can come back under an agent that merges in a loop) with
        ``MergeResult.pending`` true; the merge is sent on reconnect.
        """
        if self._status == "merged" and self._result is not None:
            return self._result
        if self._started is None:  # once handed to the outbox, never handed again
            self._writable()
            token = RemoteToken(self.base, self._base_seq, self._overlay)
            self._started = self._owner._start_merge(
                self.ops(), token, self.agent, resolvers, default
            )
            self._status = "merged"
        try:
            result = await self._owner._outcome(*self._started)
        except CrdtStateError:  # it failed: nothing of it applied, the branch may try again
            self._started, self._status = None, "open"
            raise
        self._result = result
        return result

    def rebase(self) -> None:
        """Move the fork base to the replica's current version, replaying own edits.

        The new base includes the overlay of merges not yet confirmed. On error (a
        change that no longer applies) the branch is unchanged.
        """
        self._writable()
        fresh = self._owner.fork(self.agent)
        for op in self.ops():
            if op.kind == "set":
                fresh.set(op.path, op.value)
            elif op.kind == "append":
                fresh.extend(op.path, op.value)
            elif op.path in fresh:
                fresh.delete(op.path)
        self._main, self._side = fresh._main, fresh._side
        self._base_seq, self._overlay = fresh._base_seq, fresh._overlay

    def discard(self) -> None:
        """Drop the branch's changes; later writes raise :class:`~crdt_state.BranchClosed`."""
        if self._status == "open":
            self._status = "discarded"
            self._main.discard()
            if self._side is not None:
                self._side.discard()

    def __repr__(self) -> str:
        return (
            f"<RemoteBranch agent={self.agent!r} base={self.base} {self._status}"
            f" changes={len(self.changes())}>"
        )
