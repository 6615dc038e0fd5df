"""One hub's reader of the ``in`` streams of every room it owns: one ``XREAD`` for all.

Each owner loop would otherwise hold a blocking ``XREAD`` of its own room's ``in`` stream
and pay one Redis round trip per batch. :class:`Inbox` reads the ``in`` streams of every
room the hub owns in one ``XREAD BLOCK`` call, each from where that room's reading got
to, and hands each room's entries to its :class:`InSlot`, which the room's owner loop
takes them from (:meth:`InSlot.take`), in stream order. The follower does the same for
``out`` (:mod:`sync.server.cluster.follower`).

A slot holding :data:`~sync.server.cluster.owner.BATCH` entries or more is left out of
the reads until its owner took them (an owner busy committing does not make the hub
buffer without bound). A room registered while a read is blocked is read from the next
call on: reads block for at most :data:`BLOCK` seconds. A Redis that does not answer
fails every slot's next :meth:`InSlot.take` with ``ClusterUnavailable`` (their owners step
down, as when their own read failed). Like the follower's, the read names many rooms'
keys, so it needs one Redis server (on a Redis Cluster it would be one read per slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from redis.asyncio import Redis

from sync.server.cluster.clients import CALL_TIMEOUT
from sync.server.cluster.errors import ClusterUnavailable
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace
from sync.server.cluster.lease import UNAVAILABLE
from sync.server.cluster.link import Link
from sync.server.cluster.streamio import Entry, end_if_cancelled, read_rooms

__all__ = ["BLOCK", "InSlot", "Inbox"]

log = logging.getLogger("crdt_state.cluster")

BLOCK: Final = 0.05
"""Longest wait of one read (seconds): how late a newly owned room is first read."""
COUNT: Final = 256
"""Most entries read per stream and call (an owner's batch)."""
LINGER: Final = 0.003
"""Pause after a read that found entries (seconds), so the next read finds more.

At a paced load a read would otherwise return one entry of one room almost every time
(and each such entry makes its own batch: a transaction, a publish, a replica apply on
every hub); a few milliseconds gather the entries of several rooms, which then go
through the owners together (one PostgreSQL transaction, one Redis pipeline)."""


class InSlot:
    """The entries of one owned room's ``in`` stream read so far and not yet taken.

    Args:
        room: the room.
        position: the ``in`` id after which to read.
    """

    def __init__(self, room: str, position: str) -> None:
        self.room = room
        self.position = position
        """The id of the newest entry read (the next read starts after it)."""
        self.entries: list[Entry] = []
        self.error: ClusterUnavailable | None = None
        self.ready = asyncio.Event()

    def full(self) -> bool:
        """True while the slot holds a batch or more: not read until some are taken."""
        return len(self.entries) >= COUNT

    async def take(self, timeout: float) -> list[Entry]:
        """Up to :data:`COUNT` entries, oldest first, waiting up to ``timeout`` for some.

        Raises:
            ClusterUnavailable: the hub's read failed (Redis did not answer).
        """
        if not self.entries and self.error is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.ready.wait()
        return self.take_now()

    def take_now(self) -> list[Entry]:
        """Up to :data:`COUNT` entries, oldest first, without waiting (maybe none).

        Raises:
            ClusterUnavailable: the hub's read failed (Redis did not answer).
        """
        self.ready.clear()
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        batch = self.entries[:COUNT]
        del self.entries[:COUNT]
        return batch

    def _deliver(self, entries: list[Entry]) -> None:
        if entries:
            self.entries.extend(entries)
            self.position = entries[-1][0]
            self.ready.set()

    def _fail(self, error: ClusterUnavailable) -> None:
        self.error = error
        self.ready.set()


class Inbox:
    """Reads the ``in`` streams of the rooms registered (see the module doc).

    Args:
        redis: the cluster's Redis: the inbox reads on a connection of its own made with
            its settings (:class:`~sync.server.cluster.link.Link`), closed by
            :meth:`aclose`.
        linger: the pause after a read that found entries (see :data:`LINGER`).
        space: the cluster's key space, which names the ``in`` streams.
    """

    def __init__(
        self, redis: Redis, *, linger: float = LINGER, space: KeySpace = DEFAULT_SPACE
    ) -> None:
        self.redis = redis
        self.space = space
        self.link = Link(redis)
        self.linger = linger
        self.slots: dict[str, InSlot] = {}
        self.reads = 0
        """``XREAD`` calls made so far (for tests and metrics)."""
        self._changed = asyncio.Event()

    def register(self, room: str, position: str) -> InSlot:
        """Start reading ``room``'s ``in`` stream after ``position``; its slot.

        A slot registered earlier for the room is replaced (its entries are dropped).
        """
        slot = InSlot(room, position)
        self.slots[room] = slot
        self._changed.set()
        return slot

    async def aclose(self) -> None:
        """Close the inbox's connection (a later read opens a new one)."""
        await self.link.aclose()

    def unregister(self, slot: InSlot) -> None:
        """Stop reading for ``slot`` (its owner stepped down)."""
        if self.slots.get(slot.room) is slot:
            del self.slots[slot.room]

    async def run(self) -> None:
        """Read until cancelled."""
        while True:
            await self._round()
            end_if_cancelled()

    async def _round(self) -> None:
        reading = {name: slot for name, slot in self.slots.items() if not slot.full()}
        if not reading:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(BLOCK):
                    await self._changed.wait()
            return
        positions = {name: slot.position for name, slot in reading.items()}
        try:
            self.reads += 1
            async with asyncio.timeout(BLOCK + CALL_TIMEOUT):  # the client has none
                got = await read_rooms(
                    self.link, positions, "in", count=COUNT, block=BLOCK, space=self.space
                )
        except UNAVAILABLE as exc:
            error = ClusterUnavailable("redis", f"redis did not answer: {exc}")
            for slot in reading.values():
                slot._fail(error)
            await asyncio.sleep(BLOCK)
            return
        for name, entries in got:
            read = reading.get(name)
            if read is not None and self.slots.get(name) is read:  # not replaced meanwhile
                read._deliver(entries)
        if got and self.linger > 0:
            await asyncio.sleep(self.linger)
