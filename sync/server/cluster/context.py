"""What a room's cluster machinery needs from its hub's node (a protocol, no import cycle).

:class:`~sync.server.cluster.node.ClusterNode` implements it;
:mod:`~sync.server.cluster.cluster_room` and :mod:`~sync.server.cluster.pgstorage` use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

if TYPE_CHECKING:
    from sync.server._room import Room, Session
    from sync.server.cluster.inbox import Inbox
    from sync.server.cluster.keys import KeySpace
    from sync.server.cluster.outbox import Outbox
    from sync.server.cluster.renewals import Renewals
    from sync.server.cluster.storage import RoomStorage

__all__ = ["MergeAnswered", "NodeContext"]

MergeAnswered = Callable[["Room", "str | None", bytes, "float | None", bool], None]
"""Told every merge answer of a room (room, agent, result frame, seconds since it was
forwarded, whether this hub answers the client); the hub's inspector."""


class NodeContext(Protocol):
    """One hub's cluster membership, as its rooms see it."""

    hub_id: str
    lease_ttl: float
    answer_timeout: float
    max_document: int
    postgres_dsn: str | None
    merge_answered: MergeAnswered | None

    @property
    def key_space(self) -> KeySpace:
        """The cluster's Redis key space, which names every key and channel of a room.

        Its id is read from PostgreSQL as the node starts.
        """
        ...

    @property
    def redis(self) -> Redis:
        """The node's Redis client (streams, leases, awareness)."""
        ...

    @property
    def inbox(self) -> Inbox:
        """The node's reader of the ``in`` streams of the rooms it owns."""
        ...

    @property
    def outbox(self) -> Outbox:
        """The node's pipelined Redis writes (``in`` entries, awareness, ``out`` scripts)."""
        ...

    @property
    def renewals(self) -> Renewals:
        """The node's lease renewals, sent together (one script call for many rooms)."""
        ...

    @property
    def pool(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        """The node's PostgreSQL connection pool (fences, stored positions)."""
        ...

    @property
    def storage(self) -> RoomStorage:
        """Where the node's rooms load their replica and judge states from."""
        ...

    def policies_for(self, name: str) -> Mapping[Any, object]:
        """The path policies room ``name`` is judged with."""
        ...

    def close_session(self, session: Session, code: int, reason: str) -> None:
        """Close ``session``'s connection with ``code`` and ``reason``, from synchronous code."""
        ...
