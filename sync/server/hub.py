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
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from websockets.asyncio.server import Server, ServerConnection, serve

from crdt_state import SharedState
from sync.server._admission import Admission
from sync.server._connections import AWARENESS_TOO_LARGE as AWARENESS_TOO_LARGE  # re-exported
from sync.server._connections import HubConnections
from sync.server._desk import MergeDesk
from sync.server._inline import inline_connection
from sync.server._logmask import masking_logger
from sync.server._room import Room
from sync.server._rooms import RoomRegistry
from sync.server._security import HubConfigError, check_secret
from sync.server.limits import Limits
from sync.server.observe import Inspector

if TYPE_CHECKING:
    from sync.server.cluster.node import ClusterNode

__all__ = ["Hub"]

log = masking_logger("crdt_state.hub")


class Hub(HubConnections):
    """An asyncio websocket hub; use ``async with Hub(...) as hub:``.

    Args:
        host, port: where to listen (port 0 picks a free port; see :attr:`port`).
        db: a directory for the rooms' state, one SQLite file per room, created when
            missing (``None``: in memory only). With it, no change is sent to any client
            before it is stored (see :mod:`sync.server._room`). ``""`` is refused
            (:class:`~sync.server.HubConfigError` ``db``): as a path it would be the
            current directory, where the command line's ``--db ''`` means memory.
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
            live in PostgreSQL and ``db`` is not used (``hub.db`` is ``None``): ``/readyz``
            checks Redis and PostgreSQL instead (:mod:`sync.server.cluster.readiness`).
        cluster_options: extra keyword arguments of the cluster node (``lease_ttl``,
            ``answer_timeout``, ``stop_timeout``).

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
        if isinstance(db, str) and not db.strip():
            raise HubConfigError(
                "db",
                f"db={db!r} names no directory: pass db=None to keep rooms in memory only, "
                "or a directory such as db='hub.db'",
            )
        self.host = host
        self._port = port
        # a cluster hub's rooms live in PostgreSQL: its db is neither used nor checked
        clustered = redis is not None or postgres is not None
        self.db = Path(db) if db is not None and not clustered else None
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
        self.abandoned: list[str] = []
        """What the last :meth:`stop` gave up on, by name (empty: it all ended)."""
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

    def held_bytes(self, room: str) -> int:
        """Bytes of peers' updates ``room``'s judge holds until what they build on arrives.

        The judge is the room's state on a single hub, the owner's in a cluster: 0 for a
        room this hub does not own (its replica takes only what the owner accepted), or
        does not hold.
        """
        if self._cluster is not None:
            cluster_room = self._cluster.rooms.get(room)
            return cluster_room.held_bytes if cluster_room is not None else 0
        loaded = self.rooms.get(room)
        return loaded.state.held_bytes if loaded is not None else 0

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
        if self._cluster is None and self.db is not None and self._state_factory is None:
            # once listening: a hub that cannot listen (port taken) makes no directory
            from sync.server._store import check_room_directory

            try:
                check_room_directory(self.db)  # HubConfigError: not a directory it can write
            except HubConfigError:
                server, self._server = self._server, None
                server.close()
                await server.wait_closed()
                raise
        log.info("hub listening on ws://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        """Stop listening, close every connection and every room's storage.

        A cluster hub's part is bounded (``cluster_options`` ``stop_timeout``, 10 s): what
        it gave up on (a room whose last write PostgreSQL never answered) is logged and
        left in :attr:`abandoned`; threads blocked on it may remain, so a process should
        then exit without waiting for them (``crdt-state hub`` does).
        """
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
            self.abandoned = await self._cluster.stop()
        await self._registry.close()

    async def __aenter__(self) -> Self:
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

    async def has_room(self, name: str) -> bool:
        """True when ``name`` is loaded or stored here (its file, or in the cluster's store).

        Asking loads nothing and creates nothing (an inspector watching a room waits for it).
        """
        if name in self.rooms:
            return True
        if self._cluster is not None:
            return await self._cluster.storage.has_room(name)
        from sync.server._store import room_file, room_file_fits

        return self.db is not None and room_file_fits(name) and room_file(self.db, name).exists()

    async def room(self, name: str) -> Room:
        """The room called ``name``, loaded (or created) on first use.

        A room no one joins within ``Limits.room_idle_seconds`` is unloaded again.
        """
        return await self._registry.room(name)


def _cluster_node(
    hub: Hub, redis: str | None, postgres: str | None, options: Mapping[str, Any]
) -> ClusterNode:
    """The cluster membership of ``hub`` (needs the ``cluster`` extra)."""
    if redis is None or postgres is None:
        raise HubConfigError(
            "cluster_options", "a hub joins a cluster with both redis and postgres"
        )
    from sync.server.cluster.node import ClusterNode
    from sync.server.cluster.readiness import readiness_checks

    node = ClusterNode(
        redis,
        postgres,
        policies_for=hub._policies_for,
        max_document=hub.limits.max_document,
        **options,
    )
    hub.inspector.readiness_checks.extend(readiness_checks(node))  # /readyz: Redis, PostgreSQL
    return node
