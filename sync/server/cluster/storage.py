"""Where a cluster room's durable state comes from: the judge's and the replicas'.

A hub needs two kinds of state per room:

- a **replica** (``SharedState(follower=True)``) on every hub serving the room: loaded
  read-only from the durable store when the hub joins the room, then kept current by the
  ``out`` stream; it answers sync step 1 and fans changes out to the hub's sessions;
- a **judge** on the owner only: loaded after the fence was claimed, judging merges, and
  writing every change to the store under that fence.

:class:`RoomStorage` is that contract. :class:`StreamReplayStorage` keeps nothing durable:
it rebuilds both states from the ``out`` stream (for tests of the stream machinery and
for a cluster whose Redis keeps its streams; it loses the rooms with Redis).
:mod:`sync.server.cluster.pgstorage` is the PostgreSQL one that hubs use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from redis.asyncio import Redis

from crdt_state import SharedState
from sync.server.cluster.keys import room_key
from sync.server.cluster.ownership import Ownership
from sync.server.cluster.streamio import read_all
from sync.server.cluster.streams import decode_out

__all__ = ["RoomStorage", "StreamReplayStorage"]


class RoomStorage(Protocol):
    """How a hub loads a room's states (see the module doc)."""

    durable: bool
    """True when the states come from a durable store: a replica then follows ``out``
    from the entry that was newest before it was loaded; otherwise from the start."""

    async def open_replica(self, room: str) -> SharedState:
        """The room's committed content as a follower replica (read-only load)."""
        ...

    async def open_judge(
        self, room: str, ownership: Ownership, resolvers: Mapping[Any, object]
    ) -> SharedState:
        """Load the room's state for judging under ``ownership``, after the claim.

        Every write of the returned state commits only while ``ownership.fence`` is
        the room's.
        """
        ...

    def committed(self, judge: SharedState, position: str) -> None:
        """The owner's batch ending at ``in`` id ``position`` is durable in ``judge``."""
        ...

    def forget(self, judge: SharedState) -> None:
        """``judge`` is closed (the owner stepped down)."""
        ...

    async def stored_position(self, room: str) -> str | None:
        """The last ``in`` id committed with the room's state (``None``: unknown)."""
        ...


class StreamReplayStorage:
    """States rebuilt from the room's ``out`` stream (nothing durable; see the module doc)."""

    durable = False

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def _replay(self, room: str, state: SharedState) -> SharedState:
        for _id, fields in await read_all(self.redis, room_key(room, "out")):
            update = decode_out(fields).update
            if update:
                await state.aapply_update(update)
        return state

    async def open_replica(self, room: str) -> SharedState:
        """An empty follower replica: it takes the room from ``out``'s first entry."""
        return SharedState(follower=True)

    async def open_judge(
        self, room: str, ownership: Ownership, resolvers: Mapping[Any, object]
    ) -> SharedState:
        """A judge holding every update published on the room's ``out`` stream."""
        return await self._replay(room, SharedState(resolvers=resolvers))

    def committed(self, judge: SharedState, position: str) -> None:
        """Nothing to record: positions are not stored."""

    def forget(self, judge: SharedState) -> None:
        """Nothing to release."""

    async def stored_position(self, room: str) -> str | None:
        """Always ``None``: nothing is stored."""
        return None
