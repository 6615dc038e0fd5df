"""The hub's loaded rooms: loading on first use, unloading after a time without connections.

A room stays in memory (its state, its open SQLite file) while clients are
joined to it. :class:`IdleRooms` starts a timer when a room is left empty (or
loaded with no one joined) and cancels it when someone joins; when it fires,
the hub's ``unload`` callback flushes the room, closes its file and forgets
it, and the next join loads it again. Rooms that were never joined (loaded to
be read by the hub's owner) are unloaded the same way. :class:`RoomRegistry` holds the
loaded rooms and does the loading and unloading (opening and closing a room's state runs
on a worker thread); after unloads it gives the freed memory back to the operating system
(:class:`~sync.server._memory.MemoryTrimmer`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from crdt_state import SharedState
from sync.server._memory import MemoryTrimmer
from sync.server._room import Room

__all__ = ["IdleRooms", "RoomRegistry"]

log = logging.getLogger("crdt_state.hub")

OpenRoom = Callable[[str, Callable[[SharedState], Room]], Awaitable[Room]]
"""How a cluster node opens a room: ``open_room(name, make_room)``."""


class IdleRooms:
    """Timers that unload rooms left without connections (event-loop thread only).

    Args:
        idle_seconds: how long a room stays loaded with no connection.
        unload: called with the room's name when its timer fires (it checks again
            that the room is empty, and unloads it).
        enabled: False for rooms that live only in memory (unloading them would lose
            them): no timer is ever started.
    """

    def __init__(
        self, idle_seconds: float, unload: Callable[[str], None], *, enabled: bool = True
    ) -> None:
        self.idle_seconds = idle_seconds
        self.enabled = enabled
        self._unload = unload
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._timers)

    def idle(self, name: str) -> None:
        """Room ``name`` has no connection from now on: unload it after ``idle_seconds``."""
        self.busy(name)
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        self._timers[name] = loop.call_later(self.idle_seconds, self._fire, name)

    def busy(self, name: str) -> None:
        """Room ``name`` has a connection again: keep it loaded."""
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, name: str) -> None:
        self._timers.pop(name, None)
        self._unload(name)

    def cancel_all(self) -> None:
        """Stop every timer (the hub is stopping: it closes every room itself)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


class RoomRegistry:
    """The rooms a hub has loaded, by name (event-loop thread only).

    Args:
        open_state: builds or reopens the state of a room (runs on a worker thread).
        idle_seconds: how long a room stays loaded with no connection.
        unload_enabled: False when rooms live only in memory (they are never unloaded).
        open_room: a cluster node's way to open a room (instead of ``open_state``).
    """

    def __init__(
        self,
        open_state: Callable[[str], SharedState],
        idle_seconds: float,
        *,
        unload_enabled: bool,
        open_room: OpenRoom | None = None,
    ) -> None:
        self.rooms: dict[str, Room] = {}
        self.idle = IdleRooms(idle_seconds, self._unload_later, enabled=unload_enabled)
        self._open_state = open_state
        self._open_room = open_room
        self._opening: dict[str, asyncio.Future[Room]] = {}
        self._unloading: dict[str, asyncio.Task[None]] = {}
        self.memory = MemoryTrimmer()
        """Trims the heap after unloads (see :mod:`sync.server._memory`)."""

    @property
    def unloading(self) -> int:
        """How many rooms are being unloaded now."""
        return len(self._unloading)

    async def room(self, name: str) -> Room:
        """The room called ``name``, loaded (or created) on first use.

        A room no one joins within ``idle_seconds`` is unloaded again.
        """
        room = self.rooms.get(name)
        if room is not None:
            return room
        pending = self._opening.get(name)
        if pending is not None:
            return await pending
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Room] = loop.create_future()
        self._opening[name] = future
        try:
            unloading = self._unloading.get(name)
            if unloading is not None:  # its file must be closed before it is opened again
                await asyncio.shield(unloading)
            if self._open_room is not None:
                room = await self._open_room(name, lambda s: Room(name, s, loop))
            else:
                state = await asyncio.to_thread(self._open_state, name)
                room = Room(name, state, loop)
            self.rooms[name] = room
            self.idle.idle(name)
            future.set_result(room)
            return room
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved
            raise
        finally:
            self._opening.pop(name, None)

    async def joined(self, name: str) -> Room:
        """The room ``name`` for a new connection: loaded, and kept loaded."""
        room = await self.room(name)
        while self.rooms.get(name) is not room:  # unloaded before this join: load again
            room = await self.room(name)
        self.idle.busy(name)
        return room

    def left(self, name: str, room: Room) -> None:
        """A connection left ``room``: start its idle timer when it is empty."""
        if not room.sessions and self.rooms.get(name) is room:
            self.idle.idle(name)

    def _unload_later(self, name: str) -> None:
        """Unload room ``name`` if it still has no connection (its idle timer fired)."""
        room = self.rooms.get(name)
        if room is None or room.sessions or name in self._unloading:
            return
        del self.rooms[name]  # a join from now on waits for the unload, then loads it again
        self._unloading[name] = asyncio.create_task(self._unload(name, room))

    async def _unload(self, name: str, room: Room) -> None:
        """Flush ``room``, close its file and forget it."""
        try:
            room.flush()
            await asyncio.to_thread(room.close)
            log.debug(
                "room %s unloaded after %.0f s without connections", name, self.idle.idle_seconds
            )
            self.memory.freed()
        except Exception:
            log.exception("room %s: closing its state failed", name)
        finally:
            self._unloading.pop(name, None)

    async def close(self) -> None:
        """Stop the timers, wait for unloads under way, close every room."""
        self.idle.cancel_all()
        if self._unloading:
            await asyncio.gather(*self._unloading.values(), return_exceptions=True)
        for room in self.rooms.values():
            room.close()
        self.rooms.clear()
        await self.memory.close()
