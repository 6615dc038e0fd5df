"""One hub's follower of every open room's ``out`` stream: one ``XREAD`` for all of them.

A hub serving many rooms would otherwise hold one blocking ``XREAD`` (and one pooled Redis
connection) per room, and pay one round trip per room with news. :class:`Follower` reads
the ``out`` streams of every room it follows in one ``XREAD BLOCK`` call, from each
room's own position, and hands the entries each room got to it in one call
(:meth:`~sync.server.cluster.cluster_room.ClusterRoom.apply_entries`), in stream order:
several entries of a room (a follower catching up after a stall, or a busy room) go
into its replica as one update.

A room this hub owns is left out of the reads while its owner's lease holds and the
replica has every entry up to the owner's newest (``ClusterRoom.current``): only that owner
can publish, and it applies each entry it publishes to the replica itself
(``ClusterRoom.published``), so the follower would only read back what is applied already.
Entries such an owner applied while a read was on its way (the room's position moved past
them) are skipped: their answers would reach the sessions twice.

A room that must load its replica again (Redis failed or restarted, or applying an entry
failed) is left out of the reads until its resync is done; a Redis that does not answer
sends every room to resync. A room added while a read is blocked is read from the next
call on: reads block for at most :data:`BLOCK` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Final

from redis.asyncio import Redis

from sync.server.cluster.clients import CALL_TIMEOUT
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace
from sync.server.cluster.lease import UNAVAILABLE
from sync.server.cluster.link import Link
from sync.server.cluster.streamio import end_if_cancelled, later, read_rooms

if TYPE_CHECKING:
    from sync.server.cluster.cluster_room import ClusterRoom

__all__ = ["BLOCK", "COUNT", "Follower"]

log = logging.getLogger("crdt_state.cluster")

BLOCK: Final = 0.1
"""Longest wait of one read (seconds): how late a newly opened room is first read."""
COUNT: Final = 512
"""Most entries read per stream and call."""


class Follower:
    """Follows the ``out`` streams of ``rooms`` (see the module doc).

    Args:
        redis: the cluster's Redis: the follower reads on a connection of its own made
            with its settings (:class:`~sync.server.cluster.link.Link`), closed when
            :meth:`run` ends.
        rooms: the hub's open rooms by name (shared with the node: rooms it adds or
            removes are followed or dropped from the next read on).
        space: the cluster's key space, which names the ``out`` streams.
    """

    def __init__(
        self, redis: Redis, rooms: dict[str, ClusterRoom], space: KeySpace = DEFAULT_SPACE
    ) -> None:
        self.redis = redis
        self.space = space
        self.link = Link(redis)
        self.rooms = rooms
        self.reads = 0
        """``XREAD`` calls made so far (for tests and metrics)."""
        self._resyncs: dict[str, asyncio.Task[None]] = {}

    async def run(self) -> None:
        """Follow until cancelled."""
        try:
            while True:
                await self._round()
                end_if_cancelled()
        finally:
            for task in self._resyncs.values():
                task.cancel()
            await self.link.aclose()

    async def _round(self) -> None:
        positions: dict[str, str] = {}
        for name, room in list(self.rooms.items()):
            if name in self._resyncs:
                continue
            if room.stale:
                self._resync(room)
                continue
            if room.current():  # owned here: its owner applies what it publishes
                continue
            positions[name] = room.position
        if not positions:
            await asyncio.sleep(BLOCK)
            return
        try:
            self.reads += 1
            async with asyncio.timeout(BLOCK + CALL_TIMEOUT):  # the client has none
                got = await read_rooms(
                    self.link, positions, "out", count=COUNT, block=BLOCK, space=self.space
                )
        except UNAVAILABLE as exc:
            log.info("redis unavailable while following (%s): reloading the replicas", exc)
            for room in list(self.rooms.values()):
                self._resync(room)
            await asyncio.sleep(BLOCK)
            return
        for name, entries in got:
            target = self.rooms.get(name)
            if target is None or name in self._resyncs:
                continue
            # entries the room's owner on this hub applied while the read was on its
            # way (the position moved past them) are left out: their answers would
            # reach the sessions twice
            moved = target.position != positions.get(name)
            try:
                batch = [e for e in entries if later(e[0], target.position)] if moved else entries
                if batch:
                    target.apply_entries(batch)
            except Exception:
                log.exception("room %r: following failed, reloading its replica", name)
                self._resync(target)

    def _resync(self, room: ClusterRoom) -> None:
        """Load ``room``'s replica again (in a task); it is not read until that is done."""
        if room.name in self._resyncs:
            return
        task = asyncio.create_task(room.resync(), name=f"resync {room.name}")
        self._resyncs[room.name] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._resyncs.get(room.name) is finished:
                del self._resyncs[room.name]
            with contextlib.suppress(asyncio.CancelledError):
                if finished.exception() is not None:  # retried on the next round
                    room.stale = True

        task.add_done_callback(done)

    def drop(self, name: str) -> None:
        """Stop following ``name`` (the room closed): cancel its resync, if any."""
        task = self._resyncs.pop(name, None)
        if task is not None:
            task.cancel()
