"""How a live merge of the outbox ends or goes on (no I/O).

A merge ends applied (:meth:`LiveMerges._finish`) or failed (:meth:`LiveMerges._fail`,
which fails every later merge whose chain names it, with :class:`~crdt_state.BrokenChain`);
or it goes on: sent again in its place with settled values (:meth:`LiveMerges._resend`),
or, refused for its chain or its stale base, it waits until every earlier merge it depends
on has ended and is then judged again by the client (:meth:`LiveMerges._unblock`).
:class:`LiveMerges` is the base of :class:`~sync.client._outbox.Outbox`, which holds the
state and calls these under the replica's lock.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from crdt_state import (
    BrokenChain,
    Change,
    Conflict,
    ConflictError,
    CrdtStateError,
    MergeResult,
    Retry,
    SharedState,
    VersionVector,
)
from crdt_state.resolvers import PolicyTable
from sync.client._events import Event, Finished, Send
from sync.client._offline import OfflineStore, PendingMerge
from sync.client._overlay import depends_on
from sync.client._settle import rejudge_merge, substitute
from sync.client._shown import ShownMerges, entry_of

__all__ = ["MAX_ROUNDS", "LiveMerge", "LiveMerges"]

MAX_ROUNDS = 64
"""How many times one merge is sent before it fails (settled conflicts keep coming back)."""
_ROUND_BACKOFF = Retry(attempts=MAX_ROUNDS, base_delay=0.002, max_delay=0.2)
_KEEP_FAILED = 100_000


def _names(chain: tuple[int, ...], request_id: int) -> bool:
    """True when the increasing ``chain`` holds ``request_id``."""
    at = bisect_left(chain, request_id)
    return at < len(chain) and chain[at] == request_id


def _as_applied(merge: PendingMerge, conflicts: tuple[Conflict, ...]) -> PendingMerge:
    """``merge`` with the values the hub's policies gave its conflicting paths."""
    settled = {c.path: c.resolution for c in conflicts if c.resolved}
    if not any(op.path in settled for op in merge.ops):
        return merge
    return replace(merge, ops=substitute(merge.ops, settled))


@dataclass
class LiveMerge:
    """One submitted merge until it ends; ``merge`` is the request standing for it now."""

    merge: PendingMerge
    table: PolicyTable
    conflicts: list[Conflict] = field(default_factory=list)
    rounds: int = 1
    ids: set[int] = field(default_factory=set)
    blocked: bool = False  # refused for its chain: waits for the merges it depends on


class LiveMerges:
    """The ending and re-sending of an outbox's live merges (the caller holds the lock)."""

    new_id: Callable[[], int]
    _replica: SharedState
    _store: OfflineStore | None
    _live: dict[int, LiveMerge]
    _order_of: dict[int, int]
    _failed: OrderedDict[int, None]
    _shown: ShownMerges

    def _finish(self, live: LiveMerge, result: MergeResult) -> list[Event]:
        merge = live.merge
        if result.token <= self._replica.token:
            self._remove(live)
        else:  # keep showing it, as applied, until the replica has the update that carries it
            self._live.pop(merge.order, None)
            self._order_of.pop(merge.request_id, None)
            applied = _as_applied(merge, result.conflicts)
            self._shown.confirm(result.token, entry_of(applied))
            if applied is not merge:  # the overlay shows the hub's values from now on
                self._shown.rebuild()
            if self._store is not None:
                self._store.confirm_pending(merge.request_id, result.token)
        return [Finished(merge.order, result=result)]

    def _fail(self, live: LiveMerge, error: CrdtStateError) -> list[Event]:
        merge = self._remove(live)
        # what the merge would have written (Change.to_dict: JSON data), so that whoever
        # reads a failure no one awaited (RemoteState.failed) can still redo the work
        error.details.setdefault("agent", merge.agent)
        error.details.setdefault("request_id", merge.request_id)
        error.details.setdefault("changes", [op.to_dict() for op in merge.ops])
        for request_id in live.ids:
            self._failed[request_id] = None
        while len(self._failed) > _KEEP_FAILED:
            self._failed.popitem(last=False)
        events: list[Event] = [Finished(merge.order, error=error)]
        for order, other in sorted(self._live.items()):
            if order <= merge.order or order not in self._live:
                continue
            named = sorted(i for i in live.ids if _names(other.merge.chain, i))
            if named and depends_on(merge.ops, other.merge.ops):
                events += self._fail(
                    other,
                    BrokenChain(
                        "an earlier merge of the agent that this one builds on failed",
                        details={"request_ids": named},
                    ),
                )
        return events

    def _remove(self, live: LiveMerge) -> PendingMerge:
        merge = live.merge
        self._live.pop(merge.order, None)
        self._order_of.pop(merge.request_id, None)
        self._shown.rebuild()
        if self._store is not None:
            self._store.remove_pending(merge.request_id)
        return merge

    def _resend(
        self,
        live: LiveMerge,
        ops: list[Change],
        base: VersionVector,
        seen: dict[tuple[str, ...], Any] | None = None,
    ) -> list[Event]:
        """Send the merge again, in its place, with ``ops`` judged against ``base``.

        ``seen`` holds the values there, when known: the merge can then be judged again.
        """
        if live.rounds >= MAX_ROUNDS:
            return self._fail(
                live,
                ConflictError("conflicts kept coming back from the hub", conflicts=live.conflicts),
            )
        old = live.merge
        new = PendingMerge(self.new_id(), old.order, old.agent, base, ops, seen=seen)
        self._order_of.pop(old.request_id, None)
        self._order_of[new.request_id] = new.order
        live.merge, live.blocked = new, False
        live.ids.add(new.request_id)
        self._shown.rebuild()
        if self._store is not None:
            self._store.replace_pending(old.request_id, new)
        live.rounds += 1
        delay = _ROUND_BACKOFF.delay(live.rounds - 2) if live.rounds > 2 else 0.0
        return [Send(new, delay)]

    def _unblock(self) -> list[Event]:
        """Judge again every waiting merge whose earlier dependencies have all ended."""
        events: list[Event] = []
        progress = True
        while progress:
            progress = False
            for order, live in sorted(self._live.items()):
                if live.blocked and self._ready(order, live):
                    events += self._rejudge(live)
                    progress = True
                    break
        return events

    def _ready(self, order: int, live: LiveMerge) -> bool:
        """True once every earlier merge it depends on ended and the replica holds it."""
        ops = live.merge.ops
        if any(o < order and depends_on(x.merge.ops, ops) for o, x in self._live.items()):
            return False
        return not self._shown.holds_back(order, ops)

    def _rejudge(self, live: LiveMerge) -> list[Event]:
        replica = self._replica
        try:
            ops, conflicts, seen = rejudge_merge(live.merge, live.table, replica)
        except (BrokenChain, ConflictError) as exc:
            return self._fail(live, exc)
        live.conflicts.extend(conflicts)
        if not ops:  # every change settled to the value already there: nothing to send
            result = MergeResult(
                token=replica.token,
                conflicts=tuple(live.conflicts),
                fast_forward=False,
                agent=live.merge.agent,
            )
            return self._finish(live, result)
        # judged on the replica's values: a hub whose history starts later (it restarted
        # again, or the replica was behind) refuses it as stale again, and it is judged
        # again on what the replica holds then
        return self._resend(live, ops, replica.token, seen)
