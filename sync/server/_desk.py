"""A single hub's judging of merge requests, and its short cut from the read callback.

:class:`MergeDesk` judges a merge request with the room's ``SharedState`` and queues its
answer (:meth:`MergeDesk.merge`), for merges the handler's loop read and for merges it
took from a connection's read callback (:meth:`MergeDesk.take`): those are judged
together, once per loop iteration, in the order they came. A hub in a cluster judges
nothing here: the room's owner does.
"""

from __future__ import annotations

import asyncio
import time

from websockets.asyncio.server import ServerConnection

from sync.server._expiry import token_expired
from sync.server._handshake import peer_address
from sync.server._inline import InlineConnection
from sync.server._logmask import masking_logger
from sync.server._merge import judge_merge_unwaited, refused_reply, storage_failed_reply
from sync.server._merge_limits import limits_refusal
from sync.server._room import Room, Session
from sync.server._sending import close_later
from sync.server.limits import Limits
from sync.server.observe import Inspector
from sync.server.peer import READ_ONLY, HubPeer, MergeDenied, MergeRequested
from sync.wire import protocol as p
from sync.wire.errors import CloseCode

__all__ = ["DECODE_ON_LOOP", "MergeDesk"]

log = masking_logger("crdt_state.hub")

_MERGE = int(p.MessageType.MERGE)
DECODE_ON_LOOP = 256 * 2**10
"""Messages this large or larger are decoded off the loop's thread, never taken."""

_Taken = tuple[ServerConnection, Room, Session, MergeRequested | MergeDenied]


class MergeDesk:
    """The merges of a hub outside a cluster: judged, answered, some taken early.

    Args:
        limits: the hub's limits (merge size, document size).
        inspector: told of every judged merge (metrics, the live feed).
    """

    def __init__(self, limits: Limits, inspector: Inspector) -> None:
        self.limits = limits
        self.inspector = inspector
        self._taken: list[_Taken] = []  # taken from read callbacks, not judged yet

    def take(
        self, ws: ServerConnection, room: Room, session: Session, peer: HubPeer, data: bytes
    ) -> bool:
        """Take ``data`` in the read callback when it is a merge nothing delays.

        Called for a message that would be the next one the hub handler's loop reads
        while that loop waits for one (see :class:`~sync.server._inline.InlineConnection`):
        handling it here is what the loop would do, without waking its task. Only what
        needs no waiting is taken (a merge request or a read-only one's refusal, from a
        connection whose token is valid, whose last merge's answer is sent and which has
        no other merge taken and not judged yet); everything else is left to the loop
        (``False``, nothing done).

        A taken merge is judged in one loop callback with the other merges taken in the
        same loop iteration (:meth:`_judge_taken`), as the handler's loop judged the
        messages of one iteration in one burst of task steps (less CPU than judging each
        as its bytes arrive). The callback runs before any task step a later message of
        the connection causes (the loop runs callbacks in the order they were
        scheduled), so a connection's messages are still handled in order.

        Rooms kept in memory and durable rooms use it alike: judged once per loop
        iteration, a durable room's merges reach the store's queue in one burst and cost
        less CPU than through the handler's loop. A durable merge's answer still waits
        until the merge is in the room's file (:meth:`merge` returns the future of that
        round, kept as ``session.unsent``): until it is sent, this method takes nothing
        more from the connection, whose next message waits in the handler's loop for
        it, so one merge per connection waits for the disk at a time and the answers
        keep their order; a failing store answers with the typed ``storage`` error, as
        through the loop. :meth:`_judge_taken` pops each merge before judging it, so a
        frame kept by a cycle holds no batch of connections.
        """
        if not data or data[0] != _MERGE or session.taken:
            return False
        unsent = session.unsent
        if unsent is not None and not unsent.done():
            return False
        grant = session.grant
        if grant is not None and token_expired(grant):
            return False
        if len(data) >= DECODE_ON_LOOP or len(data) > self.limits.max_merge_bytes:
            return False
        try:
            event = peer.receive(data)
        except Exception:  # PeerRefused, or a bug: the loop decodes it again and closes
            return False
        if not isinstance(event, (MergeRequested, MergeDenied)):
            return False
        session.taken = True
        self._taken.append((ws, room, session, event))
        if len(self._taken) == 1:
            asyncio.get_running_loop().call_soon(self._judge_taken)
        return True

    def _judge_taken(self) -> None:
        """Judge the merges :meth:`take` took since the last call, in order."""
        taken, self._taken = self._taken, []
        taken.reverse()
        while taken:  # popped: this frame holds no connection once judged (see above)
            ws, room, session, event = taken.pop()
            session.taken = False
            self._answer_taken(ws, room, session, event)
            del ws, room, session, event

    def _answer_taken(
        self,
        ws: ServerConnection,
        room: Room,
        session: Session,
        event: MergeRequested | MergeDenied,
    ) -> None:
        """Judge (or refuse) a merge :meth:`take` took, as the handler's loop would."""
        session.unsent = None
        try:
            if isinstance(event, MergeDenied):
                self.refuse_read_only(room, session, event)
            else:
                session.unsent = self.merge(room, session, event.request)
        except Exception:
            log.exception("internal error on connection %s", peer_address(ws))
            if isinstance(ws, InlineConnection):
                ws.message_sink = None  # the loop handles what may still come
            close_later(ws, CloseCode.INTERNAL_ERROR, "internal error")

    def refuse(self, room: Room, session: Session, frame: bytes) -> None:
        """Answer a merge refused before it was judged (a limit, a read-only token).

        Counted and shown as a merge ended in error (metrics, inspector feeds), as one the
        judge refused.
        """
        room.reply(session, frame)
        self.inspector.merge_judged(room, session.label, frame, time.perf_counter())

    def refuse_read_only(self, room: Room, session: Session, event: MergeDenied) -> None:
        """Refuse the merge a read-only session sent (:meth:`refuse`: counted, shown)."""
        reason = "read-only token: merges are refused"
        self.refuse(room, session, refused_reply(event.request, room.state, READ_ONLY, reason))

    def merge(
        self, room: Room, session: Session, request: p.MergeRequest
    ) -> asyncio.Future[None] | None:
        """Judge a merge request of ``session`` and queue its answer (a hub outside a cluster).

        Returns:
            For a durable room, a future done once the answer is sent; else ``None``.
        """
        state = room.state
        session.agent = request.agent or session.agent
        refusal = limits_refusal(request, self.limits)
        if refusal is not None:
            self.refuse(room, session, refused_reply(request, state, *refusal))
            return None
        max_document = self.limits.max_document
        started = time.perf_counter()
        done = judge_merge_unwaited(
            state,
            request,
            agent=session.label,
            scope=session.writer,
            too_large=lambda extra: room.would_exceed(extra, max_document),
        )
        agent = request.agent or session.label
        if state.store is None:  # in memory: durable at once
            room.reply(session, done)  # after the update frame carrying the merge
            self.inspector.merge_judged(room, agent, done, started, durable=True)
            return None
        # with the update frame carrying the merge, once it is durable; the
        # connection's next message is handled only then (one merge waits at a time)
        inspector = self.inspector
        return room.reply_once_durable(
            session,
            done,
            lambda error: storage_failed_reply(request, state, error),
            lambda: inspector.merge_judged(room, agent, done, started, durable=True),
        )
