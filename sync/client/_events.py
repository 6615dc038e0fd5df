"""What the client's sans-I/O core asks its driver to do: the events it returns.

:class:`~sync.client.core.ClientCore` (and the outbox inside it,
:mod:`sync.client._outbox`) never touch a socket or a clock; they return these events,
which the asyncio driver (:class:`~sync.client._link.Link`) carries out in order:

- :class:`Frame`: send these bytes to the hub now;
- :class:`Send`: send this merge's request, after ``delay`` seconds (contention
  backoff), if it is still due then;
- :class:`Finished`: a merge ended; tell its caller (or keep the outcome for later).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from crdt_state import CrdtStateError, MergeResult
from sync.client._offline import PendingMerge

__all__ = ["ClientEvent", "Event", "Finished", "Frame", "Send"]


@dataclass(frozen=True, slots=True)
class Frame:
    """Send ``data`` to the hub now."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``merge`` to the hub (after ``delay`` seconds: contention backoff)."""

    merge: PendingMerge
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Finished:
    """The merge at ``order`` ended: applied (``result``) or failed (``error``)."""

    order: int
    result: MergeResult | None = None
    error: CrdtStateError | None = None


Event: TypeAlias = Send | Finished
"""What the outbox returns."""
ClientEvent: TypeAlias = Frame | Send | Finished
"""What the core returns."""
