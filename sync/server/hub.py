"""The websocket sync hub: rooms of shared state over the y-websocket protocol.

A thin asyncio layer over ``websockets``: it authenticates the handshake,
passes each message through the connection's sans-I/O :class:`~sync.server.peer.HubPeer`
(which decodes it and checks what the connection may send), carries out the
resulting event against the room's :class:`~crdt_state.SharedState`, and
pumps the frames queued for each session. Stock Yjs clients join a room with
the standard sync protocol; our clients also send branch merges (message type
100), judged by the very same ``SharedState.commit`` as in-process merges.

One bad client never takes the hub down: malformed frames close that
connection (1002/1003), writes from a read-only token close it with 1008,
oversized messages and documents with 1009, and every other session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from crdt_state import (
    CrdtStateError,
    SharedState,
)
from sync.server._handshake import peer_address, refuse, request_token, room_name
from sync.server._merge import DOCUMENT_TOO_LARGE, judge_merge
from sync.server._room import Room, Session
from sync.server.auth import AuthError, Grant, verify_token
from sync.server.limits import Limits
from sync.server.peer import (
    AwarenessQueried,
    AwarenessReceived,
    HubPeer,
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

log = logging.getLogger("crdt_state.hub")

_ROOM_NAME = re.compile(r"^[A-Za-z0-9._~\-]+(/[A-Za-z0-9._~\-]+)*$")
_TRY_AGAIN_LATER = 1013


class Hub:
    """An asyncio websocket hub; use ``async with Hub(...) as hub:``.

    Args:
        host, port: where to listen (port 0 picks a free port; see :attr:`port`).
        db: a SQLite file for the rooms' state (``None``: in memory only). With it,
            no change is sent to any client before it is stored (see :mod:`sync.server._room`).
        secret: HMAC secret for access tokens; ``None`` accepts everyone, and
            the hub then says so in its log.
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
    ) -> None:
        self.host = host
        self._port = port
        self.db = Path(db) if db is not None else None
        self.secret = secret
        self.limits = limits or Limits()
        self._room_policies = dict(resolvers or {})
        self._state_factory = state_factory
        self.rooms: dict[str, Room] = {}
        self._grants: dict[Any, tuple[str, Grant | None]] = {}
        self._server: Server | None = None
        self._connections = 0
        self._opening: dict[str, asyncio.Future[Room]] = {}
        self._cluster: ClusterNode | None = None
        if redis is not None or postgres is not None:
            self._cluster = _cluster_node(self, redis, postgres, cluster_options or {})

    # -- lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        """Start listening (after joining the cluster, when given one)."""
        if self._cluster is not None:
            await self._cluster.start()
        if self.secret is None:
            log.warning(
                "hub started without a secret: every client may read and write every room "
                "(listening on %s)",
                self.host,
            )
        self._server = await serve(
            self._handle,
            self.host,
            self._port,
            process_request=self._process_request,
            max_size=self.limits.max_message,
            compression=None,
            max_queue=64,
        )
        log.info("hub listening on ws://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        """Stop listening, close every connection and every room's storage."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._cluster is not None:
            await self._cluster.stop()
        for room in self.rooms.values():
            room.close()
        self.rooms.clear()

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
        """The path policies of room ``name``: every matching room glob's, the most
        specific (most literal characters) last, so its rules win."""
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
        """The room called ``name``, loaded (or created) on first use."""
        room = self.rooms.get(name)
        if room is not None:
            return room
        pending = self._opening.get(name)
        if pending is not None:
            return await pending
        future: asyncio.Future[Room] = asyncio.get_running_loop().create_future()
        self._opening[name] = future
        try:
            loop = asyncio.get_running_loop()
            if self._cluster is not None:
                room = await self._cluster.open_room(name, lambda s: Room(name, s, loop))
            else:
                state = await asyncio.to_thread(self._new_state, name)
                room = Room(name, state, loop)
            self.rooms[name] = room
            future.set_result(room)
            return room
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved
            raise
        finally:
            self._opening.pop(name, None)

    # -- handshake -------------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        name = room_name(request.path)
        if name is None:
            return refuse(connection, HTTPStatus.BAD_REQUEST, "bad room name")
        if self._connections >= self.limits.max_connections:
            return refuse(connection, HTTPStatus.SERVICE_UNAVAILABLE, "too many connections")
        room = self.rooms.get(name)
        if room is not None and len(room.sessions) >= self.limits.max_room_connections:
            return refuse(connection, HTTPStatus.SERVICE_UNAVAILABLE, "room is full")
        grant: Grant | None = None
        if self.secret is not None:
            try:
                grant = verify_token(self.secret, request_token(request), name)
            except AuthError as exc:
                log.info("refused %s for room %s: %s", peer_address(connection), name, exc.code)
                return refuse(connection, HTTPStatus(exc.http_status), exc.reason)
        self._grants[connection.id] = (name, grant)
        return None

    # -- per connection ----------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        name, grant = self._grants.pop(ws.id, (None, None))
        if name is None:
            await ws.close(CloseCode.POLICY_VIOLATION, "handshake not authorised")
            return
        self._connections += 1
        session: Session | None = None
        room: Room | None = None
        writer: asyncio.Task[None] | None = None
        try:
            room = await self.room(name)
            session = Session(
                grant=grant,
                remote=peer_address(ws),
                max_outbox=self.limits.max_outbox,
                on_overflow=lambda _: _close_later(ws, _TRY_AGAIN_LATER, "client too slow"),
                connection=ws,
            )
            room.join(session)
            writer = asyncio.create_task(_pump(ws, session))
            peer = HubPeer(can_write=session.can_write)
            session.enqueue_many(HubPeer.greeting(room.state.token, list(room.awareness.values())))
            async for data in ws:
                event = peer.receive(data)
                if event is not None:
                    await self._on_event(room, session, event)
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
            self._connections -= 1
            if room is not None and session is not None:
                if self._cluster is not None:
                    self._cluster.leave(room, session)
                room.leave(session)
                session.outbox.put_nowait(None) if not session.outbox.full() else None
            if writer is not None:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await writer

    async def _on_event(self, room: Room, session: Session, event: PeerEvent) -> None:
        """Carry out one event of a connection against its room."""
        state = room.state
        if isinstance(event, SyncRequested):  # sent once all it holds is durable
            room.send_durable(session, p.encode_sync_step2(state.get_update(event.since)))
        elif isinstance(event, UpdateReceived):
            if room.would_exceed(len(event.update), self.limits.max_document):
                raise PeerRefused(
                    DOCUMENT_TOO_LARGE,
                    "document size limit reached",
                    close_code=CloseCode.MESSAGE_TOO_BIG,
                )
            if self._cluster is not None:
                await self._cluster.forward_update(room, session, event.update)
                return
            try:
                await state.aapply_update(event.update, origin=session.label)
            except CrdtStateError as exc:
                raise PeerRefused(
                    "update_refused",
                    f"update refused: {exc.code}",
                    close_code=CloseCode.UNSUPPORTED_DATA,
                ) from exc
        elif isinstance(event, AwarenessReceived):
            room.awareness[session.id] = event.payload
            room.broadcast(p.encode_awareness(event.payload), exclude=session.id)
            if self._cluster is not None:
                await self._cluster.publish_awareness(room, event.payload)
        elif isinstance(event, AwarenessQueried):
            for payload in room.awareness.values():
                session.enqueue(p.encode_awareness(payload))
        elif self._cluster is not None:
            await self._cluster.forward_merge(room, session, event.request)
        else:
            max_document = self.limits.max_document
            done = await judge_merge(
                state,
                event.request,
                agent=session.label,
                scope=session.writer,
                too_large=lambda extra: room.would_exceed(extra, max_document),
            )
            room.reply(session, done)  # after the update frame carrying the merge


_closing: set[asyncio.Task[None]] = set()


def _cluster_node(
    hub: Hub, redis: str | None, postgres: str | None, options: Mapping[str, Any]
) -> ClusterNode:
    """The cluster membership of ``hub`` (needs the ``cluster`` extra)."""
    if redis is None or postgres is None:
        raise ValueError("a hub joins a cluster with both redis and postgres")
    from sync.server.cluster.node import ClusterNode

    return ClusterNode(
        redis,
        postgres,
        policies_for=hub._policies_for,
        max_document=hub.limits.max_document,
        **options,
    )


def _close_later(ws: ServerConnection, code: int, reason: str) -> None:
    """Close ``ws`` from synchronous code (the close handshake runs as a task)."""
    task = asyncio.ensure_future(ws.close(code, reason))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def _pump(ws: ServerConnection, session: Session) -> None:
    """Send the session's queued frames, in order, until ``None`` or disconnection."""
    while True:
        frame = await session.outbox.get()
        session.busy = True
        try:
            while frame is not None:  # send what is queued without waking up again
                try:
                    await ws.send(frame)
                except ConnectionClosed:
                    return
                try:
                    frame = session.outbox.get_nowait()
                except asyncio.QueueEmpty:
                    break
            else:
                return
        finally:
            session.busy = False
