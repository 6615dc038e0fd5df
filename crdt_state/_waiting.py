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

__all__ = ["MAX_BYTES", "MAX_HELD_BYTES", "MAX_UPDATES", "WaitingUpdates"]

MAX_UPDATES: Final = 256
MAX_BYTES: Final = 8 * 1024 * 1024
MAX_HELD_BYTES: Final = 256 * 1024
"""Most bytes of structs a state keeps pending for origins it lacks (Yjs keeps them
without a bound). Every update is tried with them, so each costs in proportion to what
is held (~12 ms an update at 430 KB on the test machine): a peer sending one struct built
on something unseen, under a new client id each time, made every later update of the
room dearer without end (2,000 such updates of 200 bytes: 12 s). An update that would
leave more held is refused (nothing changed). A peer's sync step 2 sends whatever the
receiver lacks, so a legitimate peer leaves little pending, and only until its base
arrives."""


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
