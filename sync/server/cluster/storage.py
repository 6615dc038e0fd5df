"""Where a cluster room's durable state comes from: the judge's and the replicas'.

A hub needs two kinds of state per room:

- a **replica** (``SharedState(follower=True)``) on every hub serving the room: loaded
  read-only from the durable store when the hub joins the room, then kept current by the
  ``out`` stream; it answers sync step 1 and fans changes out to the hub's sessions;
- a **judge** on the owner only: loaded after the fence was claimed (or preloaded
  read-only while the holder's lease ran out, then caught up after the claim), judging
  merges, and writing every change to the store under that fence.

:class:`RoomStorage` is that contract; :mod:`sync.server.cluster.pgstorage` is the
PostgreSQL one that hubs use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from crdt_state import SharedState
from sync.server.cluster.ownership import Ownership

__all__ = ["RoomStorage"]


class RoomStorage(Protocol):
    """How a hub loads a room's states (see the module doc)."""

    durable: bool
    """True when the states come from a durable store: a replica then follows ``out``
    from the entry that was newest before it was loaded; otherwise from the start."""

    async def open_replica(self, room: str) -> SharedState:
        """The room's committed content as a follower replica (read-only load)."""
        ...

    async def preload(self, room: str, resolvers: Mapping[Any, object]) -> SharedState:
        """The room's judge state loaded before a claim, refusing every write.

        Only :meth:`open_judge` (after a claim) may make it take writes. Raises when
        there is nothing to preload (the caller then opens the judge after its claim).
        """
        ...

    async def open_judge(
        self,
        room: str,
        ownership: Ownership,
        resolvers: Mapping[Any, object],
        preloaded: SharedState | None = None,
    ) -> SharedState:
        """Load the room's state for judging under ``ownership``, after the claim.

        Every write of the returned state commits only while ``ownership.fence`` is
        the room's. ``preloaded`` (from :meth:`preload`, owned by the callee from then
        on) is caught up with what was committed since its load, or closed and replaced.
        """
        ...

    def committed(self, judge: SharedState, position: str) -> None:
        """The owner's batch ending at ``in`` id ``position`` is durable in ``judge``."""
        ...

    def forget(self, judge: SharedState) -> None:
        """``judge`` is closed (the owner stepped down)."""
        ...

    async def has_room(self, room: str) -> bool:
        """True when the room was ever stored (an owner claimed it): an inspector may watch."""
        ...

    async def stored_position(self, room: str) -> str | None:
        """The last ``in`` id committed with the room's state (``None``: unknown)."""
        ...

    async def close(self) -> None:
        """Release what the storage holds for all rooms (after every room stopped)."""
        ...
