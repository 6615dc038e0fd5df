"""Peers' updates kept until the clocks before them arrive (bookkeeping only, no pycrdt).

Yjs keeps an update whose structs of a client start past what the document holds of
that client pending until the missing structs come; pycrdt would integrate it at once,
with a hole (see :mod:`crdt_state._update_checks`). A state keeps such an update here
instead, and offers it again after every update it applies. A peer that keeps sending
updates that never fit cannot make a state hold more than :data:`MAX_UPDATES` of them or
:data:`MAX_BYTES` in all: past either, the update is refused.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_BYTES", "MAX_UPDATES", "WaitingUpdates"]

MAX_UPDATES: Final = 256
MAX_BYTES: Final = 8 * 1024 * 1024


class WaitingUpdates:
    """Updates (with the agent each came from), in the order they came."""

    def __init__(self) -> None:
        self._items: list[tuple[bytes, str | None]] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        """Bytes of the updates kept."""
        return self._bytes

    def hold(self, update: bytes, agent: str | None) -> bool:
        """Keep ``update``; False (nothing kept) when that would pass a bound."""
        if len(self._items) >= MAX_UPDATES or self._bytes + len(update) > MAX_BYTES:
            return False
        self._items.append((update, agent))
        self._bytes += len(update)
        return True

    def take_all(self) -> list[tuple[bytes, str | None]]:
        """Every update kept, oldest first; none is kept any more."""
        items, self._items, self._bytes = self._items, [], 0
        return items
