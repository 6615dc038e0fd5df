"""The write side of a :class:`~sync.client.remote.RemoteState`: merges through the hub.

:class:`RemoteMerges` is a base of ``RemoteState``: a merge is queued in the client's
core (:mod:`sync.client.core`), sent while connected, and how it ends (applied, maybe
with settled conflicts, or failed) reaches the caller that still waits for it; once the
caller no longer waits, it goes to ``RemoteState.failed`` or ``RemoteState.conflicted``.
Not API: the names are ``RemoteState``'s, documented there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Generic

from crdt_state import (
    Change,
    Conflict,
    CrdtStateError,
    MergeResult,
    SharedState,
    VersionVector,
)
from crdt_state.model_type import ModelT
from sync.client._events import Finished
from sync.client._link import Link
from sync.client._offline import PendingMerge
from sync.client._outbox import Outbox
from sync.client._presence import Presence
from sync.client.core import ClientCore

__all__ = ["RemoteMerges"]

log = logging.getLogger("crdt_state.client")


class RemoteMerges(Generic[ModelT]):
    """Merges of a remote state: queued, sent to the hub, and each one's end told."""

    agent: str
    replica: SharedState[ModelT]
    presence: Presence
    failed: list[CrdtStateError]
    conflicted: list[Conflict]
    _core: ClientCore
    _outbox: Outbox
    _link: Link
    _waiting: dict[int, tuple[asyncio.Future[MergeResult], PendingMerge]]

    @property
    def pending(self) -> int:
        """Merges that have not ended yet (queued, in flight, or being settled)."""
        return len(self._outbox)

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until every merge has ended and, while connected, the replica has synced.

        ``TimeoutError`` after ``timeout`` s. Queued merges are sent before the sync of a
        new connection, so their answers come first: a read right after they all failed
        saw the replica as it was before (empty, for an agent that never reached the
        hub), not the room.
        """
        async with asyncio.timeout(timeout):
            while len(self._outbox) or (self._link.ws is not None and not self._core.synced):
                await asyncio.sleep(0.01)

    async def acommit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str | None = None,
        *,
        resolvers: Mapping[Any, object] | None = None,
        default: object | None = None,
    ) -> MergeResult:
        """Merge changes computed from the room at ``base`` (the OCC form).

        With a token from :meth:`read`, the changes build on this agent's
        unconfirmed merges that the snapshot showed (they become the chain);
        with any other token (e.g. :attr:`token`), on the confirmed state only.
        Raises :class:`ConflictError`, :class:`BrokenChain` or :class:`RemoteError`
        when the merge fails while this call still waits (offline: returns it pending).
        """
        ops = self.replica.prepare(changes)
        started = self._start_merge(ops, base, agent or self.agent, resolvers, default)
        return await self._outcome(*started)

    def _start_merge(
        self,
        ops: list[Change],
        base: VersionVector,
        agent: str,
        resolvers_: Mapping[Any, object] | None,
        default: object | None,
    ) -> tuple[PendingMerge, asyncio.Future[MergeResult] | None]:
        """Queue a merge (written to the local file first); its future when online.

        Nothing here awaits: once this returns, the merge is the outbox's, and
        :meth:`_outcome` (called as often as wanted) waits for how it ends.
        """
        table = self.replica.policies.overlay(resolvers_, default)
        merge = self._core.submit(ops, base, agent, table)
        self.presence.merging(
            [op.path for op in ops], online=self._link.ws is not None, queued=self.pending
        )
        if self._link.ws is None:
            return merge, None
        future: asyncio.Future[MergeResult] = asyncio.get_running_loop().create_future()
        self._waiting[merge.order] = (future, merge)
        return merge, future

    async def _outcome(
        self, merge: PendingMerge, future: asyncio.Future[MergeResult] | None
    ) -> MergeResult:
        """Send ``merge`` (unless sent already) and wait for how it ends, or its pending form.

        The wait is shielded: a caller cancelled (a timeout) leaves the future to take the
        hub's answer, so that waiting again returns that answer instead of merging twice.
        """
        if future is None:
            # queued: let the loop run once, or a caller merging in a loop with nothing
            # else awaited would starve the link's reconnection until it stopped
            await asyncio.sleep(0)
            return _pending_result(merge)
        if not future.done():
            await self._link.send(merge)
        return await self.presence.watch(asyncio.shield(future), lambda: self.pending)

    def _finished(self, event: Finished) -> None:
        waiting = self._waiting.pop(event.order, None)
        future = waiting[0] if waiting is not None else None
        if future is not None and not future.done():
            if event.error is not None:
                future.set_exception(event.error)
            else:
                assert event.result is not None
                future.set_result(event.result)
            return
        if event.error is not None:
            log.warning("queued merge of %s failed: %s", self.agent, event.error)
            self.failed.append(event.error)
        elif event.result is not None and event.result.conflicts:
            self.conflicted.extend(event.result.conflicts)

    def _release_waiters(self) -> None:
        """Merges awaited when the connection drops return as pending; they stay queued."""
        waiting, self._waiting = self._waiting, {}
        for future, merge in waiting.values():
            if not future.done():
                future.set_result(_pending_result(merge))


def _pending_result(merge: PendingMerge) -> MergeResult:
    return MergeResult(token=merge.base, agent=merge.agent, fast_forward=False, pending=True)
