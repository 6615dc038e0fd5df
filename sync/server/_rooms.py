"""When the hub unloads a room: after a time without any connection (no I/O here).

A room stays in memory (its state, its open SQLite file) while clients are
joined to it. :class:`IdleRooms` starts a timer when a room is left empty (or
loaded with no one joined) and cancels it when someone joins; when it fires,
the hub's ``unload`` callback flushes the room, closes its file and forgets
it, and the next join loads it again. Rooms that were never joined (loaded to
be read by the hub's owner) are unloaded the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["IdleRooms"]


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
