"""A remote agent's merges between submission and their end: the outbox (no I/O).

Each merge an agent submits stays here until it *ends*, as exactly one of:
applied (possibly with conflicts that policies settled), or failed (with a
typed error). While it lives, it is part of the agent's overlay (see
:mod:`sync.client._overlay`), and it is sent to the hub, and sent again after
reconnecting, in submission ``order``.

An applied merge stays in the overlay (and in the local file) until the
replica holds the update that carries it (:meth:`Outbox.on_replica_update`):
no read loses it for a moment.

Answers from the hub come in through :meth:`Outbox.on_result`, which returns
what to do next as events: :class:`Send` (a merge to send, possibly after a
delay) and :class:`Finished` (a merge ended). The asyncio client
(:mod:`sync.client.remote`) carries them out; the outbox itself never touches a
socket. It does write the queue to the agent's local file, when there is one.

How a refused merge goes on:

- ``conflict``/``retry``: the client's policies settle the conflicts
  (:func:`~sync.client._settle.settle_refusal`) and the merge is sent again with the
  resolved values, in the same place; or it fails with :class:`ConflictError`.
- ``broken_chain`` or ``stale_base`` (its base is older than the hub's retained
  history: queued across a hub restart or failover): the merge waits until every
  earlier merge of the agent that it depends on has ended, then is judged by the
  client against what the agent saw (:func:`~sync.client._settle.rejudge`) and sent
  again without a chain, on the replica's token.
- anything else: it fails with :class:`~sync.wire.errors.RemoteError`.

When a merge fails, every later live merge whose chain names it fails too,
with :class:`~crdt_state.BrokenChain`: nothing built on it is applied, and
nothing is dropped silently.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from crdt_state import (
    ConflictError,
    CrdtStateError,
    MergeResult,
    SharedState,
    VersionVector,
)
from crdt_state.resolvers import PolicyTable
from sync.client._events import Event, Finished, Send
from sync.client._offline import OfflineStore, PendingMerge
from sync.client._outbox_ends import MAX_ROUNDS, LiveMerge, LiveMerges
from sync.client._overlay import Overlay, OverlayEntry
from sync.client._settle import named_changes, settle_refusal
from sync.client._shown import ShownMerges, entry_of
from sync.wire import protocol as p
from sync.wire.convert import conflict_from_record
from sync.wire.errors import RemoteError

__all__ = ["MAX_ROUNDS", "Event", "Finished", "Outbox", "Send"]

_REJUDGED = frozenset({"broken_chain", "stale_base"})
"""Refusals judged again by the client against what the agent saw (a chain the hub could
not take; a base older than the hub's retained history, e.g. a merge queued across a hub
restart or a cluster failover, whose new judge starts its history at its snapshot)."""


class Outbox(LiveMerges):
    """The live merges of one remote agent, in order (thread-safe with the replica's lock).

    Request ids are drawn in increasing order, from 1 for a new writer (the
    local file keeps the next one): so the ids a chain names are mostly runs
    of consecutive ids, which travel compactly.

    Args:
        replica: the agent's replica (its confirmed values judge re-sent merges).
        store: the agent's local file, or ``None``.
    """

    def __init__(self, replica: SharedState, store: OfflineStore | None = None) -> None:
        self._replica = replica
        self._lock = replica.lock
        self._store = store
        self._next_id = store.next_request_id() if store is not None else 1
        self.new_id: Callable[[], int] = self._draw_id
        """Draws the next request id (replaceable, for tests)."""
        self._live: dict[int, LiveMerge] = {}  # by order
        self._order_of: dict[int, int] = {}  # request id now standing for a merge -> order
        self._failed: OrderedDict[int, None] = OrderedDict()  # request ids of failed merges
        self._next_order = 1
        self._shown = ShownMerges(replica, self._live_entries)

    def _live_entries(self) -> list[OverlayEntry]:
        return [entry_of(x.merge) for x in self._live.values()]

    # -- submitting ----------------------------------------------------------------------
    def _draw_id(self) -> int:
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
            return request_id

    def is_failed(self, request_id: int) -> bool:
        """True when ``request_id`` stood for a merge that failed."""
        with self._lock:
            return request_id in self._failed

    def new_order(self) -> int:
        """The place of the next merge."""
        with self._lock:
            order = self._next_order
            self._next_order += 1
            return order

    def load(
        self,
        merges: list[PendingMerge],
        confirmed: list[tuple[VersionVector, PendingMerge]] | None = None,
    ) -> None:
        """Take up, at start, the merges the local file kept.

        Args:
            merges: the queued merges, live again in their order.
            confirmed: the applied merges, as ``(token, merge)``, whose update the
                replica may not hold yet; they stay shown until it does.
        """
        with self._lock:
            for merge in merges:
                self._add(merge, self._replica.policies)
            for token, merge in confirmed or ():
                self._shown.confirm(token, entry_of(merge))
            orders = [m.order for m in merges] + [m.order for _, m in confirmed or ()]
            self._next_order = max(self._next_order, max(orders, default=0) + 1)
            ids = [m.request_id for m in merges] + [m.request_id for _, m in confirmed or ()]
            self._next_id = max(self._next_id, max(ids, default=0) + 1)
            self._shown.rebuild()

    def submit(self, merge: PendingMerge, table: PolicyTable) -> None:
        """Queue ``merge`` (and write it to the local file) before it is sent."""
        with self._lock:
            self._add(merge, table)
            if self._store is not None:
                self._store.add_pending(merge)

    def _add(self, merge: PendingMerge, table: PolicyTable) -> None:
        self._live[merge.order] = LiveMerge(merge, table, ids={merge.request_id})
        self._order_of[merge.request_id] = merge.order
        self._shown.add(entry_of(merge))

    # -- reading ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._live)

    def snapshot(self) -> Overlay:
        """The overlay now: live merges, and applied ones the replica does not hold yet."""
        with self._lock:
            self._shown.prune()
            return self._shown.overlay

    def view_of(self, key: str, base_seq: int, overlay: Overlay) -> Any:
        """Return top-level ``key`` at replica position ``base_seq`` with ``overlay`` applied.

        The value is a fresh copy, :data:`MISSING` when absent (see
        :meth:`ShownMerges.view_of <sync.client._shown.ShownMerges.view_of>`).
        """
        with self._lock:
            return self._shown.view_of(key, base_seq, overlay)

    def on_replica_update(self) -> list[Event]:
        """React to the replica taking updates from the hub.

        Forgets the applied merges the replica now holds (and drops them from the
        local file), then judges again the waiting merges that this unblocks.

        Returns:
            The events of the merges judged again.
        """
        with self._lock:
            self._shown.prune()
            forget = self._shown.forgotten()
            if self._store is not None:
                for request_id in forget:
                    self._store.remove_pending(request_id)
            return self._unblock()

    def to_send(self) -> list[PendingMerge]:
        """What to send after (re)connecting, in order: every live merge but the waiting ones."""
        with self._lock:
            return [x.merge for _, x in sorted(self._live.items()) if not x.blocked]

    def named_policies(self, merge: PendingMerge) -> tuple[tuple[int, str], ...]:
        """List the changes of ``merge`` whose policy a hub can apply itself.

        The hub then settles a conflict there in the same round, so a hot counter
        never bounces between client and hub (see
        :data:`~crdt_state.resolvers.NAMED_POLICIES`).

        Returns:
            ``(change index, policy name)`` pairs; empty when ``merge`` is not live.
        """
        with self._lock:
            order = self._order_of.get(merge.request_id)
            if order is None:
                return ()
            table = self._live[order].table
        return named_changes(merge.ops, table)

    def is_live(self, merge: PendingMerge) -> bool:
        """True while ``merge`` is the request standing for a live merge."""
        with self._lock:
            return merge.request_id in self._order_of

    # -- answers ---------------------------------------------------------------------------
    def on_result(self, reply: p.MergeReply) -> list[Event]:
        """Take the hub's answer to a request; returns what to do next."""
        with self._lock:
            order = self._order_of.get(reply.request_id)
            if order is None:
                return []  # an answer to a request that no longer stands for a merge
            live = self._live[order]
            merge = live.merge
            events: list[Event]
            if reply.status is not p.MergeStatus.ERROR:
                conflicts = (*live.conflicts, *map(conflict_from_record, reply.conflicts))
                result = MergeResult(
                    token=VersionVector.from_state(reply.token, strict=True),
                    applied=tuple(tuple(path) for path in reply.applied),
                    conflicts=conflicts,
                    fast_forward=False,
                    agent=merge.agent,
                    rounds=live.rounds,
                )
                events = self._finish(live, result)
            elif reply.error is not None and reply.error.code in _REJUDGED:
                live.blocked = True
                events = []
            else:
                try:
                    ops, conflicts_ = settle_refusal(reply, merge.ops, live.table)
                except (ConflictError, RemoteError) as exc:
                    events = self._fail(live, exc)
                else:
                    live.conflicts.extend(conflicts_)
                    events = self._resend(
                        live, ops, VersionVector.from_state(reply.token, strict=True)
                    )
            return events + self._unblock()

    def fail_request(self, request_id: int, error: CrdtStateError) -> list[Event]:
        """End the live merge that ``request_id`` stands for with ``error``.

        Later merges built on it fail too. Nothing happens when ``request_id``
        stands for no live merge.

        Returns:
            The events of every merge this ends or unblocks.
        """
        with self._lock:
            order = self._order_of.get(request_id)
            if order is None:
                return []
            return self._fail(self._live[order], error) + self._unblock()

    def fail_all(self, error: Callable[[PendingMerge], CrdtStateError]) -> list[Event]:
        """End every live merge, each with ``error(merge)``.

        The merges are ended latest first, so none ends as a broken chain instead.

        Returns:
            The events, in submission order.
        """
        with self._lock:
            events: list[Event] = []
            for _, live in sorted(self._live.items(), reverse=True):
                events += self._fail(live, error(live.merge))
            return events[::-1]

    def order_of(self, request_id: int) -> int | None:
        """The place of the live merge ``request_id`` stands for (``None``: none)."""
        with self._lock:
            return self._order_of.get(request_id)
