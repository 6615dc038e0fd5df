"""One client connection's life in the hub: admitted, joined, its messages, its leaving.

:class:`HubConnections` is the base of :class:`~sync.server.hub.Hub`: the websocket
handler takes the connection's admitted grant, joins its room as a
:class:`~sync.server._room.Session`, passes each message through the connection's
sans-I/O :class:`~sync.server.peer.HubPeer` and carries out the resulting event against
the room (or forwards it to the room's owner in a cluster), then leaves the room. Not
API: the names are ``Hub``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from websockets.asyncio.server import Server, ServerConnection
from websockets.exceptions import ConnectionClosed

from crdt_state import CrdtStateError
from sync.server._admission import Admission
from sync.server._awareness import TooManyClients
from sync.server._desk import DECODE_ON_LOOP, MergeDesk
from sync.server._expiry import EXPIRED_TOKEN, TOKEN_EXPIRED_REASON, expire_at, token_expired
from sync.server._handshake import peer_address
from sync.server._inline import InlineConnection
from sync.server._json_model import NON_JSON_TYPE, non_json_content
from sync.server._logmask import masking_logger
from sync.server._merge import DOCUMENT_TOO_LARGE, refused_reply
from sync.server._merge_limits import limits_refusal, too_large_reply
from sync.server._room import Room, Session
from sync.server._rooms import RoomRegistry
from sync.server._sending import close_later, close_reading, pump
from sync.server.limits import Limits
from sync.server.peer import (
    EMPTY_UPDATE,
    READ_ONLY_WRITES,
    AwarenessQueried,
    AwarenessReceived,
    HubPeer,
    MergeDenied,
    PeerEvent,
    PeerRefused,
    SyncRequested,
    UpdateDenied,
    UpdateReceived,
)
from sync.wire import protocol as p
from sync.wire.errors import CloseCode, ProtocolError

if TYPE_CHECKING:
    from sync.server.cluster.node import ClusterNode

__all__ = ["AWARENESS_TOO_LARGE", "HubConnections"]

log = masking_logger("crdt_state.hub")

_TRY_AGAIN_LATER = 1013
AWARENESS_TOO_LARGE = "awareness_too_large"
"""The code of :class:`PeerRefused` for an awareness message over ``Limits.max_awareness``,
or one that would make its connection control more than ``MAX_CLIENTS_PER_CONNECTION``
clients (``sync.server._awareness``)."""


class HubConnections:
    """The hub's connection handler and what it does with each connection's messages."""

    limits: Limits
    _server: Server | None
    _connections: int
    _live: set[ServerConnection]
    _cluster: ClusterNode | None
    _desk: MergeDesk
    _registry: RoomRegistry
    _admission: Admission

    def _serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def _handle(self, ws: ServerConnection) -> None:
        name, grant = self._admission.take(ws)
        if name is None:  # the grant was dropped: the hub is stopping, or the handshake failed
            if self._serving():
                await ws.close(CloseCode.POLICY_VIOLATION, "handshake not authorised")
            else:
                await ws.close(CloseCode.GOING_AWAY, "hub shutting down")
            return
        self._connections += 1
        self._live.add(ws)
        session: Session | None = None
        room: Room | None = None
        writer: asyncio.Task[None] | None = None
        expiry: asyncio.Task[None] | None = None
        try:
            room = await self._registry.joined(name)
            session = Session(
                grant=grant,
                remote=peer_address(ws),
                max_outbox=self.limits.max_outbox_bytes,
                on_overflow=lambda _: close_later(ws, _TRY_AGAIN_LATER, "client too slow"),
                connection=ws,
            )
            room.join(session)
            log.info(
                "room %s: %s connected from %s (%s)",
                name,
                session.label,
                session.remote,
                "read-only" if not session.can_write else "read-write",
            )
            writer = asyncio.create_task(pump(ws, session))
            if grant is not None:
                expiry = asyncio.create_task(expire_at(ws, grant.expires))
            peer = HubPeer(can_write=session.can_write)
            greeting = room.awareness.greeting(self.limits.max_awareness)
            session.enqueue_many(HubPeer.greeting(room.state.token, greeting))
            if isinstance(ws, InlineConnection):  # see _take_now
                ws.message_sink = lambda data: self._take_now(ws, room, session, peer, data)
            async for data in ws:
                unsent = session.unsent
                if unsent is not None:
                    # one merge per connection waits for the disk at a time: the next message
                    # is handled once the last merge's answer is sent (a client that waits for
                    # its answers never waits here)
                    if not unsent.done():
                        await unsent
                    session.unsent = None
                if grant is not None and token_expired(grant):
                    raise PeerRefused(
                        EXPIRED_TOKEN, TOKEN_EXPIRED_REASON, close_code=CloseCode.POLICY_VIOLATION
                    )
                limit = self.limits.max_merge_bytes  # room.state only for a refusal (see below)
                refused = too_large_reply(data, room.state, limit) if len(data) > limit else None
                if refused is not None:  # answered without decoding it
                    self._desk.refuse(room, session, refused)
                    continue
                if len(data) < DECODE_ON_LOOP:
                    event = peer.receive(data)
                else:  # decoding megabytes is pure Python: other rooms go on meanwhile
                    event = await asyncio.to_thread(peer.receive, data)
                if event is not None:
                    session.unsent = await self._on_event(room, session, event)
        except PeerRefused as exc:
            log.info("closing %s: %d %s", peer_address(ws), exc.close_code, exc.reason)
            if exc.permission_denied:
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(p.encode_permission_denied(exc.reason))
            await self._give_up(ws, exc.close_code, exc.reason)
        except ConnectionClosed:
            pass
        except ConnectionError as exc:  # a server behind the hub did not answer: transient
            log.warning(
                "room %s: cannot serve %s now (%s), closing with 1013 (try again later)",
                name,
                peer_address(ws),
                exc,
            )
            await self._give_up(ws, _TRY_AGAIN_LATER, "try again later")
        except Exception:
            log.exception("internal error on connection %s", peer_address(ws))
            await self._give_up(ws, CloseCode.INTERNAL_ERROR, "internal error")
        finally:
            if isinstance(ws, InlineConnection):
                ws.message_sink = None
            self._connections -= 1
            self._live.discard(ws)
            if room is not None and session is not None:
                log.info(
                    "room %s: %s disconnected (agent %s)",
                    name,
                    session.label,
                    session.agent or "unnamed",
                )
                removal = room.leave(session)
                if self._cluster is not None:
                    self._cluster.leave(room, session, removal)
                session.outbox.close()
                self._registry.left(name, room)
            if expiry is not None:
                expiry.cancel()
            if writer is not None:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await writer

    @staticmethod
    async def _give_up(ws: ServerConnection, code: int, reason: str) -> None:
        """Close a connection its handler gave up on; what it still sends is not handled."""
        if isinstance(ws, InlineConnection):
            ws.message_sink = None
        with contextlib.suppress(ConnectionClosed):
            await close_reading(ws, code, reason)

    async def _on_event(
        self, room: Room, session: Session, event: PeerEvent
    ) -> asyncio.Future[None] | None:
        """Carry out one event of a connection against its room.

        Returns:
            For a merge whose answer waits for the disk, a future done once the answer is
            sent (the connection's next message waits for it); else ``None``.
        """
        # room.state is read where it is needed: a cluster replica applies what it
        # relayed to the sessions before it is read (Room.before_read)
        if isinstance(event, SyncRequested):  # sent once all it holds is durable
            update = room.state.get_update(event.since)
            room.send_durable(session, p.encode_sync_step2(update))
        elif isinstance(event, UpdateDenied):  # the connection stays open for reads
            if not session.told_read_only:  # once: a stock client logs it
                session.told_read_only = True
                log.info("room %s: read-only %s: writes dropped", room.name, session.label)
                session.enqueue(p.encode_permission_denied(READ_ONLY_WRITES))
        elif isinstance(event, UpdateReceived):
            if room.would_exceed(len(event.update), self.limits.max_document):
                raise PeerRefused(
                    DOCUMENT_TOO_LARGE,
                    "document size limit reached",
                    close_code=CloseCode.MESSAGE_TOO_BIG,
                )
            outside = non_json_content(event.update)
            if outside is not None:
                raise PeerRefused(
                    NON_JSON_TYPE,
                    f"update refused: {outside} is outside the JSON model",
                    close_code=CloseCode.POLICY_VIOLATION,
                )
            if self._cluster is not None:
                if event.update != EMPTY_UPDATE:  # a peer's "nothing more" (sync step 2)
                    await self._cluster.writes.forward_update(room, session, event.update)
                return None
            try:
                await room.state.aapply_update(event.update, origin=session.label)
            except CrdtStateError as exc:
                raise PeerRefused(
                    "update_refused",
                    f"update refused: {exc.code}",
                    close_code=CloseCode.UNSUPPORTED_DATA,
                ) from exc
        elif isinstance(event, AwarenessReceived):
            if len(event.payload) > self.limits.max_awareness:
                raise PeerRefused(
                    AWARENESS_TOO_LARGE,
                    "awareness message size limit reached",
                    close_code=CloseCode.MESSAGE_TOO_BIG,
                )
            changed = self._take_awareness(room, session, event.payload)
            if changed is not None:
                room.broadcast(p.encode_awareness(changed), exclude=session.id)
                if self._cluster is not None:
                    await self._cluster.publish_awareness(room, changed)
        elif isinstance(event, AwarenessQueried):
            for update in room.awareness.greeting(self.limits.max_awareness):
                session.enqueue(p.encode_awareness(update))
        elif isinstance(event, MergeDenied):  # the connection stays open for reads
            self._desk.refuse_read_only(room, session, event)
        elif self._cluster is not None:
            session.agent = event.request.agent or session.agent
            refusal = limits_refusal(event.request, self.limits)
            if refusal is not None:
                self._desk.refuse(room, session, refused_reply(event.request, room.state, *refusal))
                return None
            # the room's owner judges it
            await self._cluster.writes.forward_merge(room, session, event.request, event.frame)
        else:
            return self._merge(room, session, event.request)
        return None

    def _take_awareness(self, room: Room, session: Session, payload: bytes) -> bytes | None:
        """Apply a session's awareness update to the room; returns what changed (to relay).

        Raises :class:`PeerRefused` for a malformed update, or one that would make the
        session control more than ``MAX_CLIENTS_PER_CONNECTION`` clients or more than
        ``max_awareness`` bytes of states together (1009, as for an update over
        ``max_awareness``).
        """
        try:
            return room.awareness.receive(payload, session.id, self.limits.max_awareness)
        except ProtocolError as exc:
            raise PeerRefused(exc.code, exc.close_reason, close_code=exc.close_code) from exc
        except TooManyClients as exc:
            raise PeerRefused(
                AWARENESS_TOO_LARGE, str(exc), close_code=CloseCode.MESSAGE_TOO_BIG
            ) from exc

    def _take_now(
        self, ws: ServerConnection, room: Room, session: Session, peer: HubPeer, data: bytes
    ) -> bool:
        """Take ``data`` in the read callback when it is a merge nothing delays.

        See :meth:`sync.server._desk.MergeDesk.take`; never in a cluster, whose merges the
        room's owner judges.
        """
        if self._cluster is not None:
            return False
        return self._desk.take(ws, room, session, peer, data)

    def _merge(
        self, room: Room, session: Session, request: p.MergeRequest
    ) -> asyncio.Future[None] | None:
        """Judge a merge request of ``session`` (outside a cluster) and queue its answer.

        See :meth:`sync.server._desk.MergeDesk.merge`.
        """
        return self._desk.merge(room, session, request)
