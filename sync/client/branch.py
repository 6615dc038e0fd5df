"""What a remote agent reads: its replica plus its own unconfirmed merges.

:class:`RemoteBranch` is a branch of the replica that also sees the agent's
merges that were queued or in flight when it was forked (the overlay, frozen
at fork time); merging it sends the request ids of those it builds on as its chain.
:class:`RemoteToken` is the token :meth:`RemoteState.read` returns: the hub's
confirmed token, which also remembers the overlay that the snapshot showed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crdt_state import MISSING, Branch, MergeResult, VersionVector
from sync.client._overlay import Overlay, RemoteToken

if TYPE_CHECKING:
    from sync.client.remote import RemoteState

__all__ = ["RemoteBranch", "RemoteToken"]


class RemoteBranch(Branch):
    """A branch of a remote room: reads and edits locally, merges through the hub.

    It reads the replica at its fork base with the agent's own unconfirmed
    merges of that moment applied on top (``entries``), so an agent sees its
    own writes even before the hub has them, offline too.
    """

    def __init__(
        self,
        remote: RemoteState,
        agent: str,
        base_seq: int,
        base: VersionVector,
        overlay: Overlay | None = None,
    ) -> None:
        super().__init__(remote.replica, agent, base_seq, base)
        self._remote = remote
        self._overlay = overlay or Overlay()

    @property
    def overlay(self) -> Overlay:
        """The agent's unconfirmed merges this branch reads on top of its base."""
        return self._overlay

    # -- reading through the overlay -------------------------------------------------
    def _load(self, key: str) -> None:
        if key in self._loaded:
            return
        if key in self._overlay.keys:
            value = self._remote._outbox.view_of(key, self._base_seq, self._overlay)
        else:
            value = self._state.read_at((key,), self._base_seq)
        if value is not MISSING:
            self._local[key] = value
        self._loaded.add(key)

    def _view(self, path: tuple[str, ...]) -> Any:
        if path[0] in self._overlay.keys:
            self._load(path[0])
        return super()._view(path)

    def snapshot(self) -> dict[str, Any]:
        """The whole state as this branch sees it (base, own queued merges, own edits)."""
        for key in self._overlay.keys:
            self._load(key)
        return super().snapshot()

    # -- merging -------------------------------------------------------------------------
    def merge(self, **options: Any) -> MergeResult:
        raise TypeError("a remote branch merges with 'await branch.amerge()' or 'async with'")

    async def amerge(
        self, *, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> MergeResult:
        """Send the branch to the hub; see :meth:`RemoteState.acommit` for the outcome.

        While offline this returns at once with ``MergeResult.pending`` true;
        the merge is sent on reconnect.
        """
        if self._status == "merged" and self._result is not None:
            return self._result
        self._writable()
        result = await self._remote._submit(
            self.ops(),
            RemoteToken(self.base, self._base_seq, self._overlay),
            self.agent,
            resolvers,
            default,
        )
        self._status = "merged"
        self._result = result
        return result

    def rebase(self) -> None:
        """Move the fork base to the replica's current version and overlay, replaying own edits."""
        self._writable()
        ops = self.ops()
        fresh = self._remote.fork(self.agent)
        for op in ops:
            if op.kind == "set":
                fresh.set(op.path, op.value)
            elif op.kind == "append":
                fresh.extend(op.path, op.value)
            elif op.path in fresh:
                fresh.delete(op.path)
            else:
                fresh._load(op.path[0])
        self._base_seq, self._base = fresh._base_seq, fresh._base
        self._overlay = fresh._overlay
        self._local, self._loaded = fresh._local, fresh._loaded
        self._writes, self._appends = fresh._writes, fresh._appends
