"""A hub's membership of the cluster: its connections, its rooms, what it forwards.

:class:`ClusterNode` is what :class:`~sync.server.Hub` holds when it is given ``redis``
and ``postgres``. The hub keeps doing everything that concerns its own sessions (auth,
limits, the y-websocket protocol, fan-out); the node changes three things:

- a room is opened as a *replica* loaded from the durable store and kept current by the
  room's ``out`` stream (:class:`~sync.server.cluster.cluster_room.ClusterRoom`);
- the writes the hub receives (Yjs updates, merge requests) are not applied locally but
  appended to the room's ``in`` stream, for the room's owner to judge; the answer comes
  back on ``out`` and is delivered to the session that asked
  (:class:`~sync.server.cluster.writes.Writes`);
- awareness is published on the room's channel (Redis pub/sub, ephemeral) and what
  other hubs publish there is relayed to this hub's sessions
  (:class:`~sync.server.cluster.awareness.AwarenessRelay`).

Every key and channel of a room is named in the cluster's key space
(:class:`~sync.server.cluster.keys.KeySpace`), whose id the node reads from PostgreSQL at
start: clusters on different databases may share one Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from crdt_state import SharedState
from sync.server._room import Room, Session
from sync.server._security import HubConfigError
from sync.server.cluster.awareness import AwarenessRelay
from sync.server.cluster.clients import (
    check_postgres_dsn,
    check_redis_url,
    postgres_pool,
    probe_postgres,
    probe_redis,
    redis_client,
    safe_redis_url,
    stream_client,
)
from sync.server.cluster.cluster_room import TRY_AGAIN_LATER, ClusterRoom
from sync.server.cluster.context import MergeAnswered
from sync.server.cluster.follower import Follower
from sync.server.cluster.grants import check_privileges
from sync.server.cluster.inbox import Inbox
from sync.server.cluster.keeper import GATHER_WINDOW
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace
from sync.server.cluster.lease import UNAVAILABLE
from sync.server.cluster.outbox import Outbox
from sync.server.cluster.owner import newest_out
from sync.server.cluster.renewals import Renewals
from sync.server.cluster.schema import cluster_id, migrate
from sync.server.cluster.stopping import STOP_TIMEOUT, Deadline, closing, end_task
from sync.server.cluster.storage import RoomStorage
from sync.server.cluster.writes import Writes

__all__ = ["ClusterNode"]

log = logging.getLogger("crdt_state.cluster")

_closing: set[asyncio.Task[None]] = set()


def _hub_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class ClusterNode:
    """One hub's side of the cluster (see the module doc).

    Args:
        redis: the Redis URL (``redis://host:port/db``).
        postgres: the PostgreSQL DSN or URL.
        policies_for: the room's server-side conflict policies, by room name.
        max_document: the document size limit (bytes) the owner enforces.
        lease_ttl: the ownership lease's lifetime in seconds: a dead owner's rooms are
            free within it; a live owner keeps them through stalls of up to 5/6 of it
            (see :mod:`~sync.server.cluster.keeper`).
        answer_timeout: seconds a forwarded merge may wait for its answer before its
            session is closed with 1013 (the client then sends it again).
        storage: where room states come from (default: PostgreSQL; one of the two
            is needed).
        stop_timeout: seconds :meth:`stop` may take before it abandons what is left.
    """

    def __init__(
        self,
        redis: str,
        postgres: str | None,
        *,
        policies_for: Callable[[str], Mapping[Any, object]],
        max_document: int,
        lease_ttl: float = 1.5,
        answer_timeout: float = 5.0,
        storage: Callable[[ClusterNode], RoomStorage] | None = None,
        stop_timeout: float = STOP_TIMEOUT,
    ) -> None:
        if postgres is None and storage is None:
            raise ValueError("a cluster node needs postgres (or a storage factory)")
        self.redis_url = redis
        self.postgres_dsn = postgres
        self.policies_for = policies_for
        self.max_document = max_document
        self.lease_ttl = lease_ttl
        self.answer_timeout = answer_timeout
        self.stop_timeout = stop_timeout
        self.hub_id = _hub_id()
        self.merge_answered: MergeAnswered | None = None
        """Told every merge answer of the rooms (the hub sets its inspector's hook)."""
        self.rooms: dict[str, ClusterRoom] = {}
        self.key_space = DEFAULT_SPACE
        """The cluster's Redis key space: read from PostgreSQL at start (the default
        space for a node without PostgreSQL, on a storage of its own)."""
        self._storage_factory = storage
        self._redis: Redis | None = None
        self._streams: Redis | None = None
        """The client of the outbox, the inbox and the follower (see ``stream_client``)."""
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._storage: RoomStorage | None = None
        self._awareness: AwarenessRelay | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._outbox: Outbox | None = None
        self._inbox: Inbox | None = None
        self._renewals: Renewals | None = None
        self.writes = Writes(self, self.rooms)
        """The writes of the hub's sessions, handed to the rooms' owners."""

    @property
    def redis(self) -> Redis:
        """The node's Redis client; only valid between :meth:`start` and :meth:`stop`."""
        assert self._redis is not None, "the cluster node is not started"
        return self._redis

    @property
    def inbox(self) -> Inbox:
        """The reader of the ``in`` streams of the rooms this hub owns; only once started."""
        assert self._inbox is not None, "the cluster node is not started"
        return self._inbox

    @property
    def renewals(self) -> Renewals:
        """The lease renewals of the rooms this hub owns, gathered; only once started."""
        assert self._renewals is not None, "the cluster node is not started"
        return self._renewals

    @property
    def outbox(self) -> Outbox:
        """The node's pipelined ``XADD``/``PUBLISH`` queue; only valid once started."""
        assert self._outbox is not None, "the cluster node is not started"
        return self._outbox

    @property
    def pool(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        """The node's PostgreSQL connection pool; only valid once started."""
        assert self._pool is not None, "the cluster node is not started"
        return self._pool

    @property
    def awareness(self) -> AwarenessRelay:
        """The awareness channels of the rooms; only valid once started."""
        assert self._awareness is not None, "the cluster node is not started"
        return self._awareness

    @property
    def storage(self) -> RoomStorage:
        """Where rooms load their replica and judge states from; only valid once started."""
        assert self._storage is not None, "the cluster node is not started"
        return self._storage

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to Redis and PostgreSQL, migrate the schema, read the cluster's id.

        Raises:
            HubConfigError: the Redis URL or the PostgreSQL DSN cannot be used, Redis
                refuses the hub (``redis_auth``, ``redis_url``: see ``redis_refusal``), or
                the PostgreSQL role lacks a privilege (``postgres_privileges``).
            ClusterSchemaError: the database's schema is newer than this code, or it
                holds no usable cluster id.
            ClusterUnavailable: PostgreSQL cannot be reached (a Redis that does not
                answer yet is logged: rooms are served once it does).
        """
        check_redis_url(self.redis_url)
        if self.postgres_dsn is not None:
            check_postgres_dsn(self.postgres_dsn)
            await probe_postgres(self.postgres_dsn)
        if self.postgres_dsn is not None:  # first: the cluster's id names its Redis keys
            # a dead hub's rooms are claimed at once (one fence claim each): a pool of 4
            # queued them behind each other on a busy event loop
            self._pool = await postgres_pool(self.postgres_dsn, max_size=12)
            async with self._pool.connection() as conn:
                await migrate(conn)
                await check_privileges(conn)
                self.key_space = KeySpace(await cluster_id(conn))
        self._redis = redis_client(self.redis_url)
        try:  # on a key of the cluster's space: an ACL may allow only crdt:<cluster>:*
            why = await probe_redis(self._redis, self.redis_url, self.key_space)
        except HubConfigError:
            await self._redis.aclose()
            if self._pool is not None:
                await self._pool.close()
            raise
        if why is not None:
            shown = safe_redis_url(self.redis_url)
            log.warning("redis at %s does not answer (%s): serving once it does", shown, why)
        # the busiest loops' calls are bounded by their own asyncio.timeout (a socket
        # timeout costs each command a task in redis-py; see clients.stream_client)
        self._streams = stream_client(self.redis_url)
        self._outbox = Outbox(self._streams)
        self._outbox.start()
        # a renewal waits up to half the keepers' interval: the keepers of the hub then
        # renew in one or two calls per interval (see renewals.py)
        self._renewals = Renewals(self._redis, self.lease_ttl * GATHER_WINDOW)
        # reads in a loop: a connection of its own
        self._inbox = Inbox(self._streams, space=self.key_space)
        self._awareness = AwarenessRelay(
            self._redis, self._outbox, self.hub_id, self.rooms, self.key_space
        )
        if self._storage_factory is not None:
            self._storage = self._storage_factory(self)
        else:
            from sync.server.cluster.pgstorage import PostgresRoomStorage

            self._storage = PostgresRoomStorage(self)
        self._tasks = [
            asyncio.create_task(self._awareness.run(), name="cluster awareness"),
            asyncio.create_task(self.writes.watch_answers(), name="cluster answers"),
            asyncio.create_task(self._watch_redis(), name="cluster redis"),
            asyncio.create_task(self._follow(), name="cluster follower"),
            asyncio.create_task(self._read_in(), name="cluster inbox"),
        ]
        log.info("hub %s joined the cluster (%s)", self.hub_id, self.key_space)

    async def stop(self) -> list[str]:
        """Stop every room's tasks (giving up owned rooms) and close the connections.

        Bounded by ``stop_timeout`` (:mod:`~sync.server.cluster.stopping`): what has not
        ended by then (a room whose judge's last write PostgreSQL never answers, a pool
        that does not close) is abandoned, logged and returned by name; its threads may
        stay blocked (a process should then exit at once).
        """
        steps = Deadline(self.stop_timeout)
        await steps.run({f"room {name!r}": room.stop() for name, room in self.rooms.items()})
        self.rooms.clear()
        await steps.run({f"task {task.get_name()!r}": end_task(task) for task in self._tasks})
        await steps.run(
            closing(
                ("the room storage", self._storage, "close"),
                ("the lease renewals", self._renewals, "close"),
                ("the outbox", self._outbox, "stop"),
            )
        )
        await steps.run(
            closing(
                ("the pubsub client", self._awareness, "aclose"),
                ("the redis client", self._redis, "aclose"),
                ("the streams client", self._streams, "aclose"),
                ("the PostgreSQL pool", self._pool, "close"),
            )
        )
        lapse = f"an abandoned room's lease lapses within {self.lease_ttl:g} s"
        return steps.report(f"hub {self.hub_id}", lapse)

    # -- rooms ----------------------------------------------------------------------------
    async def open_room(self, name: str, make_room: Callable[[SharedState], Room]) -> Room:
        """Load ``name``'s replica, wrap it with ``make_room`` and start following ``out``.

        Raises:
            ClusterUnavailable: Redis or PostgreSQL did not answer.
        """
        position, newest_entry = (
            await newest_out(self.redis, name, self.key_space)
            if self.storage.durable
            else ("0-0", None)
        )
        state = await self.storage.open_replica(name)
        room = make_room(state)
        fence = newest_entry.fence if newest_entry is not None else None
        cluster_room = ClusterRoom(self, room, position, fence)
        self.rooms[name] = cluster_room
        cluster_room.start()
        await self.awareness.subscribe(name)
        return room

    # -- sessions ------------------------------------------------------------------------------
    def close_session(self, session: Session, code: int, reason: str) -> None:
        """Close ``session``'s connection from synchronous code."""
        ws = session.connection
        if ws is not None:
            self._spawn(ws.close(code, reason[:120]))

    def leave(self, room: Room, session: Session, removal: bytes | None) -> None:
        """A session left: forget its merges, tell other hubs its peers are gone.

        ``removal``: the awareness removal of the clients it controlled, which
        :meth:`Room.leave <sync.server._room.Room.leave>` returned (``None``: none).
        """
        cluster_room = self.rooms.get(room.name)
        if cluster_room is not None:
            cluster_room.answers.forget_session(session)
        self.writes.forget(room.name, session.id)
        if removal is not None:
            self._spawn(self.publish_awareness(room, removal))

    async def _follow(self) -> None:
        """Follow every open room's ``out`` stream, with one ``XREAD`` for all.

        An unexpected error is logged and following starts again, every room
        reloading its replica.
        """
        while True:
            # the follower reads in a loop on a connection of its own (Link), closed as
            # its run ends
            assert self._streams is not None
            try:
                await Follower(self._streams, self.rooms, self.key_space).run()
            except Exception:
                log.exception("following the rooms failed, reloading every replica")
                for cluster_room in self.rooms.values():
                    cluster_room.stale = True
                await asyncio.sleep(0.1)

    async def _read_in(self) -> None:
        """Read the ``in`` streams of every room this hub owns, with one ``XREAD`` for all.

        An unexpected error is logged and reading starts again (the rooms' owners keep
        their slots: the entries read are delivered, the next read starts after them).
        """
        inbox = self.inbox
        try:
            while True:
                try:
                    await inbox.run()
                except Exception:
                    log.exception("reading the owned rooms' in streams failed, starting again")
                    await asyncio.sleep(0.1)
        finally:
            with contextlib.suppress(Exception):
                await inbox.aclose()

    async def _watch_redis(self) -> None:
        """Notice a Redis restart (its ``run_id`` changes) and recover from it.

        The streams and subscriptions are gone, so every room reloads its replica and
        awareness is subscribed again.

        (A follower's blocking read may reconnect to the new server without an error, and
        would then miss what was published on the old one and not read yet.)
        """
        known: str | None = None
        while True:
            await asyncio.sleep(0.5)
            try:
                info: Any = await self.redis.info("server")
            except UNAVAILABLE:
                continue
            run_id = str(info.get("run_id", ""))
            if known is not None and run_id != known:
                log.warning("redis restarted: reloading every room's replica")
                for cluster_room in self.rooms.values():
                    cluster_room.stale = True
                    # merges forwarded before the restart are lost with the old streams:
                    # their clients send them again at once instead of after the timeout
                    for session in cluster_room.answers.overdue(float("inf")):
                        self.close_session(session, TRY_AGAIN_LATER, "cluster restarted")
                await self.awareness.resubscribe()
            known = run_id

    # -- awareness ----------------------------------------------------------------------------
    async def publish_awareness(self, room: Room, payload: bytes) -> None:
        """Publish an awareness update for the other hubs (lost if Redis is down)."""
        self.awareness.publish(room.name, payload)

    def _spawn(self, job: Any) -> None:
        task = asyncio.ensure_future(job)
        _closing.add(task)
        task.add_done_callback(_closing.discard)
