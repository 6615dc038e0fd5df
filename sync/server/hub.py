"""The websocket sync hub: rooms of shared state over the y-websocket protocol.

A thin asyncio layer over ``websockets``: it authenticates the handshake,
passes each message through the connection's sans-I/O :class:`~sync.server.peer.HubPeer`
(which decodes it and checks what the connection may send), carries out the
resulting event against the room's :class:`~crdt_state.SharedState`, and
pumps the frames queued for each session. Stock Yjs clients join a room with
the standard sync protocol; our clients also send branch merges (message type
100), judged by the very same ``SharedState.commit`` as in-process merges.

One bad client never takes the hub down: malformed frames close that
connection (1002/1003), Yjs updates from a read-only token close it with 1008
(its merge requests get an error result ``read_only`` instead),
oversized messages and documents with 1009, and every other session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from crdt_state import (
    CrdtStateError,
    SharedState,
)
from sync.server._admission import Admission
from sync.server._desk import DECODE_ON_LOOP, MergeDesk
from sync.server._expiry import EXPIRED_TOKEN, TOKEN_EXPIRED_REASON, expire_at, token_expired
from sync.server._handshake import peer_address
from sync.server._inline import InlineConnection, inline_connection
from sync.server._json_model import NON_JSON_TYPE, non_json_content
from sync.server._logmask import masking_logger
from sync.server._merge import (
    DOCUMENT_TOO_LARGE,
    refused_reply,
)
from sync.server._merge_limits import limits_refusal, too_large_reply
from sync.server._room import Room, Session
from sync.server._rooms import RoomRegistry
from sync.server._security import HubConfigError, check_secret
from sync.server._sending import close_later, pump
from sync.server.limits import Limits
from sync.server.observe import Inspector
from sync.server.peer import (
    READ_ONLY,
    AwarenessQueried,
    AwarenessReceived,
    HubPeer,
    MergeDenied,
    PeerEvent,
    PeerRefused,
    SyncRequested,
    UpdateReceived,
)
from sync.wire import protocol as p
from sync.wire.errors import CloseCode

if TYPE_CHECKING:
    from sync.server.cluster.node import ClusterNode

__all__ = ["Hub"]

log = masking_logger("crdt_state.hub")

_TRY_AGAIN_LATER = 1013
AWARENESS_TOO_LARGE = "awareness_too_large"
"""The code of :class:`PeerRefused` for an awareness message over ``Limits.max_awareness``."""


class Hub:
    """An asyncio websocket hub; use ``async with Hub(...) as hub:``.

    Args:
        host, port: where to listen (port 0 picks a free port; see :attr:`port`).
        db: a SQLite file for the rooms' state (``None``: in memory only). With it,
            no change is sent to any client before it is stored (see :mod:`sync.server._room`).
        secret: HMAC secret for access tokens. ``None`` accepts everyone (the hub then
            says so in its log): allowed on a loopback host only, unless ``insecure``.
            An empty secret is refused (:class:`~sync.server.HubConfigError`).
        insecure: allow ``secret=None`` on a non-loopback host (every client on the
            network may then read and write every room).
        resolvers: server-side conflict policies by room glob (matched like
            access tokens, with :func:`fnmatch.fnmatchcase`: ``*`` also matches
            ``/``), e.g. ``{"triage/*": {"calls": resolvers.counter}}``. When
            several globs match, the rules of the most specific win. Conflicts
            they do not settle go back to the merging client.
        limits: size and connection limits.
        state_factory: builds the state of a new room (overrides ``db``).
        redis, postgres: a Redis URL and a PostgreSQL DSN: the hub joins the cluster of
            every hub given the same two (see :mod:`sync.server.cluster.node`); rooms then
            live in PostgreSQL and ``db`` is not used.
        cluster_options: extra keyword arguments of the cluster node (``lease_ttl``,
            ``answer_timeout``).

    With ``db``, a room without connections for ``limits.room_idle_seconds`` is
    unloaded (flushed, its file closed, its memory freed) and loaded again on the
    next join; rooms in memory (no ``db``) or from ``state_factory`` stay loaded.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        db: str | Path | None = None,
        secret: str | None = None,
        resolvers: Mapping[str, Mapping[Any, object]] | None = None,
        limits: Limits | None = None,
        state_factory: Callable[[str], SharedState] | None = None,
        redis: str | None = None,
        postgres: str | None = None,
        cluster_options: Mapping[str, Any] | None = None,
        insecure: bool = False,
    ) -> None:
        check_secret(secret, host, insecure=insecure)
        self.host = host
        self._port = port
        self.db = Path(db) if db is not None else None
        self.secret = secret
        self.limits = limits or Limits()
        self._room_policies = dict(resolvers or {})
        self._state_factory = state_factory
        self._server: Server | None = None
        self._connections = 0
        self.inspector = Inspector(self)
        """HTTP routes (/healthz, /readyz, /metrics, /inspect), feeds and metrics."""
        self._cluster: ClusterNode | None = None
        if redis is not None or postgres is not None:
            self._cluster = _cluster_node(self, redis, postgres, cluster_options or {})
            self._cluster.merge_answered = self.inspector.merge_answered
        self._live: set[ServerConnection] = set()
        self._desk = MergeDesk(self.limits, self.inspector)
        self._registry = RoomRegistry(
            self._new_state,
            self.limits.room_idle_seconds,
            # rooms in memory only are never unloaded: it would lose them
            unload_enabled=self.db is not None and state_factory is None and redis is None,
            open_room=self._cluster.open_room if self._cluster is not None else None,
        )
        self.rooms: dict[str, Room] = self._registry.rooms
        """The loaded rooms, by name."""
        self._admission = Admission(
            secret,
            self.limits,
            connections=lambda: self._connections,
            room_sessions=lambda name: len(r.sessions) if (r := self.rooms.get(name)) else 0,
            serving=self._serving,
        )

    # -- lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        """Start listening (after joining the cluster, when given one)."""
        if self._cluster is not None:
            await self._cluster.start()
        if self.secret is None:
            log.warning(
                "INSECURE: hub started without a secret: every client may read and write "
                "every room (listening on %s)",
                self.host,
            )
        self._server = await serve(
            self.inspector.handler(self._handle),
            self.host,
            self._port,
            process_request=self.inspector.process_request(self._admission.check),
            create_connection=inline_connection(self.inspector.connection_class),
            process_response=self._admission.responded,
            max_size=self.limits.max_message,
            compression=None,
            max_queue=64,
            logger=masking_logger("websockets.server"),  # request lines carry ?token=
        )
        log.info("hub listening on ws://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        """Stop listening, close every connection and every room's storage."""
        if self._server is not None:
            server, self._server = self._server, None
            server.close()  # close handshakes with every client, concurrently
            try:
                async with asyncio.timeout(self.limits.shutdown_grace):
                    await server.wait_closed()
            except TimeoutError:  # clients that do not read never answer: cut them off
                for ws in list(self._live):
                    ws.transport.abort()
                await server.wait_closed()
        if self._cluster is not None:
            await self._cluster.stop()
        await self._registry.close()

    async def __aenter__(self) -> Hub:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def serve_forever(self) -> None:
        """Run until cancelled."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    @property
    def port(self) -> int:
        """The port actually listened on."""
        if self._server is not None:
            for sock in self._server.sockets:
                return int(sock.getsockname()[1])
        return self._port

    def url(self, room: str) -> str:
        """The websocket URL of ``room``."""
        return f"ws://{self.host}:{self.port}/{room}"

    # -- rooms -----------------------------------------------------------------------
    def _policies_for(self, name: str) -> dict[Any, object]:
        """Collect the path policies of room ``name`` from every matching room glob.

        The most specific glob (most literal characters) is applied last, so its rules win.
        """
        merged: dict[Any, object] = {}
        matching = [glob for glob in self._room_policies if fnmatchcase(name, glob)]
        for glob in sorted(matching, key=lambda g: len(g.replace("*", "").replace("?", ""))):
            merged.update(self._room_policies[glob])
        return merged

    def _new_state(self, name: str) -> SharedState:
        if self._state_factory is not None:
            return self._state_factory(name)
        policies = self._policies_for(name)
        if self.db is None:
            return SharedState(resolvers=policies)
        from sync.server._store import open_room_state

        return open_room_state(self.db, name, resolvers=policies)

    async def room(self, name: str) -> Room:
        """The room called ``name``, loaded (or created) on first use.

        A room no one joins within ``Limits.room_idle_seconds`` is unloaded again.
        """
        return await self._registry.room(name)

    # -- per connection ----------------------------------------------------------------
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
            session.enqueue_many(HubPeer.greeting(room.state.token, list(room.awareness.values())))
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
                    room.reply(session, refused)
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
            await ws.close(exc.close_code, exc.reason)
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("internal error on connection %s", peer_address(ws))
            await ws.close(CloseCode.INTERNAL_ERROR, "internal error")
        finally:
            if isinstance(ws, InlineConnection):
                ws.message_sink = None
            self._connections -= 1
            self._live.discard(ws)
            if room is not None and session is not None:
                if self._cluster is not None:
                    self._cluster.leave(room, session)
                log.info(
                    "room %s: %s disconnected (agent %s)",
                    name,
                    session.label,
                    session.agent or "unnamed",
                )
                room.leave(session)
                session.outbox.close()
                self._registry.left(name, room)
            if expiry is not None:
                expiry.cancel()
            if writer is not None:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await writer

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
            room.awareness[session.id] = event.payload
            room.broadcast(p.encode_awareness(event.payload), exclude=session.id)
            if self._cluster is not None:
                await self._cluster.publish_awareness(room, event.payload)
        elif isinstance(event, AwarenessQueried):
            for payload in room.awareness.values():
                session.enqueue(p.encode_awareness(payload))
        elif isinstance(event, MergeDenied):  # the connection stays open for reads
            reason = "read-only token: merges are refused"
            room.reply(session, refused_reply(event.request, room.state, READ_ONLY, reason))
        elif self._cluster is not None:
            session.agent = event.request.agent or session.agent
            refusal = limits_refusal(event.request, self.limits)
            if refusal is not None:
                room.reply(session, refused_reply(event.request, room.state, *refusal))
                return None
            # the room's owner judges it
            await self._cluster.writes.forward_merge(room, session, event.request, event.frame)
        else:
            return self._merge(room, session, event.request)
        return None

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


def _cluster_node(
    hub: Hub, redis: str | None, postgres: str | None, options: Mapping[str, Any]
) -> ClusterNode:
    """The cluster membership of ``hub`` (needs the ``cluster`` extra)."""
    if redis is None or postgres is None:
        raise HubConfigError(
            "cluster_options", "a hub joins a cluster with both redis and postgres"
        )
    from sync.server.cluster.node import ClusterNode

    return ClusterNode(
        redis,
        postgres,
        policies_for=hub._policies_for,
        max_document=hub.limits.max_document,
        **options,
    )
