"""A remote agent's side of one hub connection, sans I/O: frames in, frames and events out.

:class:`ClientCore` is to the client what :class:`~sync.server.peer.HubPeer` is to the
hub. It holds the protocol state of a remote agent: the replica of the room (a follower
:class:`~crdt_state.SharedState`), the outbox of merges that have not ended (the pending
table, see :mod:`sync.client._outbox`), which requests are in flight on the current
connection, and the hub updates held back while they are. It never touches a socket, a
clock or an event loop; a driver (the asyncio :class:`~sync.client.remote.RemoteState`)
pumps a connection through it:

- after connecting, send every frame of :meth:`ClientCore.connected`, in order;
- pass every binary message received to :meth:`ClientCore.receive` and carry out what it
  returns: :class:`Frame` (send it), :class:`~sync.client._events.Send` (send
  ``frame_for(merge)`` after ``delay`` seconds, if :meth:`ClientCore.still_due`),
  :class:`~sync.client._events.Finished` (a merge ended: tell its caller);
- after the connection drops, call :meth:`ClientCore.disconnected` with the close code
  and reason, and tell the callers of the merges it ends (:class:`Finished` events);
- to merge, :meth:`ClientCore.submit`, then send :meth:`ClientCore.frame_for` when online.

The one I/O it does is the agent's ``local`` file (an :class:`~sync.client._offline.OfflineStore`,
synchronous SQLite), where merges are written before they are sent and the replica's
updates are kept.
"""

from __future__ import annotations

from typing import Any, Final

from pycrdt import merge_updates

from crdt_state import MISSING, BrokenChain, Change, CrdtStateError, SharedState, VersionVector
from crdt_state.resolvers import PolicyTable
from crdt_state.values import tree_get
from sync.client._events import ClientEvent, Finished, Frame, Send
from sync.client._offline import OfflineStore, PendingMerge
from sync.client._outbox import Outbox
from sync.client._overlay import RemoteToken, chain_of
from sync.client._presence import Peers
from sync.wire import protocol as p
from sync.wire.convert import wire_changes
from sync.wire.errors import CloseCode, RemoteError, WriteDenied

__all__ = ["MAX_STRIKES", "ClientCore", "ClientEvent", "Frame"]

MAX_STRIKES: Final = 3
"""A merge fails once the hub dropped the connection this many times while it was the
oldest unanswered one (a hub that cannot process it closes with 1011 every time)."""
_FINAL_CLOSES: Final = {
    CloseCode.PROTOCOL_ERROR: "protocol_error",
    CloseCode.UNSUPPORTED_DATA: "unsupported_data",
    CloseCode.MESSAGE_TOO_BIG: "message_too_big",
}
"""Close codes by which the hub refuses the oldest unanswered merge for good."""

_MAX_HELD: Final = 64
"""Held hub updates are merged into one past this many."""
_FOLD_REPLICA_ROWS: Final = 1_000
"""The local file's replica rows are folded into one full update past this many."""


class ClientCore:
    """Protocol state of a remote agent: its replica, its pending merges, its connection.

    Args:
        replica: the agent's replica of the room (a ``SharedState(follower=True)``).
        writer: the agent's identity for the hub's deduplication.
        store: the agent's local file, or ``None``.

    Not thread-safe by itself: a driver calls it from one thread (the outbox and the
    replica have their own lock for readers on other threads).
    """

    def __init__(self, replica: SharedState, writer: str, store: OfflineStore | None) -> None:
        self.replica = replica
        self.writer = writer
        self.outbox = Outbox(replica, store)
        self._store = store
        self._online = False
        self._synced = False
        self._in_flight: set[int] = set()  # request ids sent on this connection, unanswered
        self._held: list[bytes] = []  # hub updates received while merges are in flight
        self._strikes: dict[int, int] = {}  # request id -> connections it was dropped on
        self.connection = 0
        """How many connections were made (the current one's number)."""
        self.flushed: frozenset[int] = frozenset()
        """The orders of the queued merges :meth:`connected` sent (the flush)."""
        self.read_only = False
        """True once the hub refused a write: merges fail at once from then on."""
        self.peers = Peers(replica.client_id)
        """The other clients' presence, from the hub's awareness messages."""

    # -- the connection ------------------------------------------------------------------
    @property
    def online(self) -> bool:
        """True between :meth:`connected` and :meth:`disconnected`."""
        return self._online

    @property
    def synced(self) -> bool:
        """True once the current connection got the hub's sync step 2."""
        return self._synced

    def load(self) -> None:
        """Take up what the local file kept: the replica, the queued and applied merges."""
        if self._store is None:
            return
        for update in self._store.load_replica():
            self.replica.apply_update(update, origin="local-file")
        self.outbox.load(self._store.load_pending(), self._store.load_confirmed())

    def connected(self) -> list[bytes]:
        """A connection is up: the frames to send first, in order.

        Queued merges first, so their answers (deduplicated when they were applied before
        a disconnect) come before the sync step 2 that includes them; then sync step 1.
        """
        self.connection += 1
        self._online, self._synced = True, False
        self.peers.clear()  # the hub's greeting tells them again
        self._in_flight.clear()
        self._held.clear()  # what the hub sent before is in its sync step 2
        frames: list[bytes] = []
        orders: list[int] = []
        for merge in self.outbox.to_send():
            frame = self.frame_for(merge)
            if frame is not None:
                frames.append(frame)
                orders.append(merge.order)
        self.flushed = frozenset(orders)
        return [*frames, p.encode_sync_step1(self.replica.token.to_state())]

    def disconnected(self, close_code: int | None = None, reason: str = "") -> list[Finished]:
        """Record that the connection dropped: nothing is in flight any more.

        ``close_code`` and ``reason`` are given when the hub closed the connection.
        Returns the merges that this ends.

        The hub answers every merge it can judge; when it closes the connection instead
        while merges are unanswered, the close code says why:

        - 1002, 1003, 1009: the oldest unanswered merge cannot be taken (malformed,
          unsupported, too big); it fails with a :class:`RemoteError`;
        - anything else (1011, a lost connection): the oldest unanswered merge is sent
          again on the next connection, and fails after :data:`MAX_STRIKES` drops (1011
          only). A 1008 (policy violation) is one of these: the hub closes with it for
          an expired token or a refused plain update as well as for a handshake cut short
          by its shutdown, so it says nothing about the merges; a refused write is told by
          a merge result with the error ``read_only`` or a permission-denied message.
        """
        unanswered = sorted(
            (order, rid)
            for rid in self._in_flight
            if (order := self.outbox.order_of(rid)) is not None
        )
        self._online = self._synced = False
        self._in_flight.clear()
        self.peers.clear()  # nobody is seen while offline
        if not unanswered or close_code is None:
            return []
        oldest = unanswered[0][1]
        error: CrdtStateError | None = None
        if close_code in _FINAL_CLOSES:
            code = _FINAL_CLOSES[CloseCode(close_code)]
            error = RemoteError(code, f"the hub closed the connection on this merge: {reason}")
        elif close_code == CloseCode.INTERNAL_ERROR:
            strikes = self._strikes[oldest] = self._strikes.get(oldest, 0) + 1
            if strikes >= MAX_STRIKES:
                error = RemoteError(
                    "hub_internal_error",
                    f"the hub failed {strikes} times on this merge (closed 1011: {reason})",
                )
        if error is None:
            return []
        self._strikes.pop(oldest, None)
        return [e for e in self.outbox.fail_request(oldest, error) if isinstance(e, Finished)]

    def _deny(self, reason: str) -> list[ClientEvent]:
        """The hub refused a write: every live merge fails, and every later one will."""
        self.read_only = True
        self._in_flight.clear()
        why = reason or "the connection may only read"
        events = self.outbox.fail_all(
            lambda merge: WriteDenied(
                f"the hub refused this merge: {why}",
                details={
                    "agent": merge.agent,
                    "request_id": merge.request_id,
                    "paths": sorted({op.path for op in merge.ops}),
                },
            )
        )
        out: list[ClientEvent] = [e for e in events if isinstance(e, Finished)]
        return out

    # -- merges out ----------------------------------------------------------------------
    def submit(
        self, ops: list[Change], base: VersionVector, agent: str, table: PolicyTable
    ) -> PendingMerge:
        """Queue a merge of ``ops`` computed on ``base`` (written to the local file first).

        With a base from :class:`~sync.client.branch.RemoteToken`, the merge names the
        agent's unconfirmed merges it builds on as its chain.

        Raises:
            WriteDenied: the hub refused a write of this client before (nothing is
                queued).
            BrokenChain: it builds on an earlier merge of the agent that failed.
            ProtocolError: a value the wire cannot carry (nothing is queued).
        """
        if self.read_only:
            raise WriteDenied(
                "the hub refuses writes from this client (its token may only read)",
                details={"agent": agent, "paths": sorted({op.path for op in ops})},
            )
        chain, seen = self._chain(ops, base)
        merge = PendingMerge(
            self.outbox.new_id(),
            self.outbox.new_order(),
            agent,
            VersionVector(base),  # a plain vector, whatever kind of token it was given
            ops,
            chain,
            seen,
        )
        wire_changes(ops)  # refuse what the wire cannot carry before queueing it
        self.outbox.submit(merge, table)
        return merge

    def frame_for(self, merge: PendingMerge) -> bytes | None:
        """Build the request frame of ``merge`` to send now; it is in flight from here.

        Returns:
            The frame, or ``None`` when offline, read-only, or already sent on this
            connection.
        """
        if not self._online or self.read_only or merge.request_id in self._in_flight:
            return None
        self._in_flight.add(merge.request_id)
        return p.encode_merge_request(
            merge.request_id,
            merge.agent,
            merge.base.to_state(),
            wire_changes(merge.ops),
            self.writer,
            merge.chain,
            self.outbox.named_policies(merge),
        )

    def still_due(self, merge: PendingMerge, connection: int) -> bool:
        """Tell whether a :class:`Send` delayed since ``connection`` is still due.

        A send from an earlier connection is not (after a reconnect every live merge
        was sent again already), nor one for a merge that has ended.
        """
        return self.connection == connection and self.outbox.is_live(merge)

    def _chain(
        self, ops: list[Change], base: VersionVector
    ) -> tuple[tuple[int, ...], dict[tuple[str, ...], Any] | None]:
        """The ids of the unconfirmed merges ``ops`` build on, and what the agent saw.

        ``seen`` holds the value the agent's view had, before its own changes, at each
        path ``ops`` set or delete (``None`` for a base that is not a
        :class:`RemoteToken`): with it, a merge the hub refuses for its chain or its
        stale base is judged again by the client.
        """
        if not isinstance(base, RemoteToken):
            return (), None
        overlay, seq = base.overlay, base.seq
        chained = chain_of(overlay.entries, ops) if overlay.entries else []
        gone = sorted(e.request_id for e in chained if self.outbox.is_failed(e.request_id))
        if gone:  # computed on top of a change that will never be applied
            raise BrokenChain(
                "this merge builds on an earlier merge of the agent that failed",
                details={"request_ids": gone},
            )
        views: dict[str, Any] = {}
        seen: dict[tuple[str, ...], Any] = {}
        for op in ops:
            if op.kind == "append":
                continue
            key = op.path[0]
            if key not in views:
                views[key] = self.outbox.view_of(key, seq, overlay)
            value = views[key]
            seen[op.path] = MISSING if value is MISSING else tree_get({key: value}, op.path)
        if not chained:  # ``seen`` still lets the client judge it again (stale base)
            return (), seen
        # the chain names every merge the view held (a superset of those it builds on,
        # mostly one run of consecutive ids); only those it depends on can fail it
        ids = sorted(
            e.request_id for e in overlay.entries if not self.outbox.is_failed(e.request_id)
        )
        return tuple(ids), seen

    # -- frames in -----------------------------------------------------------------------
    def receive(self, data: bytes) -> list[ClientEvent]:
        """What one message from the hub leads to.

        Raises:
            ProtocolError: the hub sent a malformed message (drop the connection).
            InvalidUpdate: the hub sent an update or a state vector that does not apply.
        """
        message = p.decode_message(data)
        if isinstance(message, p.SyncStep1):
            since = VersionVector.from_state(message.state_vector, strict=True)
            return [Frame(p.encode_sync_step2(self.replica.get_update(since)))]
        if isinstance(message, (p.SyncStep2, p.SyncUpdate)):
            events: list[ClientEvent] = []
            if self._in_flight:  # it may carry a merge whose answer has not come yet
                self._held.append(message.update)
                if len(self._held) > _MAX_HELD:
                    self._held = [bytes(merge_updates(*self._held))]
            else:
                events = self._apply([message.update])
            if isinstance(message, p.SyncStep2):
                self._synced = True
            return events
        if isinstance(message, p.MergeReply):
            self._in_flight.discard(message.request_id)
            self._strikes.pop(message.request_id, None)
            if message.error is not None and message.error.code == WriteDenied.code:
                return self._deny(message.error.message) + self._take_held()
            events = self._due(self.outbox.on_result(message))
            if self._held and not self._in_flight:
                held, self._held = self._held, []
                events += self._apply(held)
            return events
        if isinstance(message, p.PermissionDenied):  # the hub closes with 1008 next
            if message.reason == p.TOKEN_EXPIRED_REASON:  # not a refusal of writes: they
                return []  # stay queued, sent again once connected with a fresh token
            return self._deny(message.reason) + self._take_held()
        if isinstance(message, p.Awareness):
            self.peers.receive(message.payload)
        return []  # other auth and unknown messages: nothing to do

    def _take_held(self) -> list[ClientEvent]:
        """Apply the held hub updates once nothing is in flight any more."""
        if not self._held or self._in_flight:
            return []
        held, self._held = self._held, []
        return self._apply(held)

    def _apply(self, updates: list[bytes]) -> list[ClientEvent]:
        """Take the hub's updates into the replica (and the local file).

        Updates that arrive while merges are in flight are held until their answers
        came: the hub sends a merge's update before its answer, and until the answer the
        merge is still shown from the overlay, so taking the update earlier would show
        it twice (appends) or hide later writes.
        """
        for update in updates:
            self.replica.apply_update(update, origin="hub")
            store = self._store
            if store is not None and store.append_replica(update) > _FOLD_REPLICA_ROWS:
                store.save_replica(self.replica.get_update())  # fold the rows into one
        return self._due(self.outbox.on_replica_update())

    def _due(self, events: list[Send | Finished]) -> list[ClientEvent]:
        """The outbox's events, with the sends due now turned into frames."""
        out: list[ClientEvent] = []
        for event in events:
            if isinstance(event, Send) and not event.delay:
                frame = self.frame_for(event.merge)
                if frame is not None:
                    out.append(Frame(frame))
            else:
                out.append(event)
        return out

    # -- closing -------------------------------------------------------------------------
    def save(self) -> None:
        """Fold the replica into the local file and close it (when there is one).

        The file is closed, and so free for the next client, even when the fold fails.
        """
        if self._store is not None:
            try:
                self._store.save_replica(self.replica.get_update())
            finally:
                self._store.close()
