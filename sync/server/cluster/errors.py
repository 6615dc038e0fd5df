"""Exceptions of the hub cluster (``sync.server.cluster``), each with a stable ``code``.

Hierarchy::

    crdt_state.CrdtStateError, sync.SyncError
    └── ClusterError                         code "cluster"
        ├── Fenced                           code "fenced"
        ├── LeaseLost                        code "lease_lost"
        ├── ClusterUnavailable(ConnectionError)  code "cluster_unavailable"
        └── ClusterSchemaError               code "cluster_schema"

Programs match on ``code`` (or the class), never on the message; ``details`` holds the
values involved (room, fences, reason) as JSON-friendly data.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from crdt_state import CrdtStateError
from sync.wire.errors import SyncError

__all__ = [
    "ClusterError",
    "ClusterSchemaError",
    "ClusterUnavailable",
    "Fenced",
    "LeaseLost",
    "LossReason",
]


class ClusterError(CrdtStateError, SyncError):
    """Root of every error raised by ``sync.server.cluster``."""

    code = "cluster"


class Fenced(ClusterError):
    """A write under a fencing number that is no longer the room's current one.

    Raised inside the caller's PostgreSQL transaction, before anything is written: the
    caller lets it propagate so the transaction rolls back, and stops acting as the room's
    owner (another hub claimed the room since). ``details``: ``room``, ``fence`` (the one
    the caller holds) and ``current`` (the room's fence in PostgreSQL, ``None`` when the
    room was never claimed).
    """

    code = "fenced"

    def __init__(self, room: str, fence: int, current: int | None) -> None:
        super().__init__(
            f"room {room!r}: fence {fence} is stale (current: {current})",
            details={"room": room, "fence": fence, "current": current},
        )
        self.room = room
        self.fence = fence
        self.current = current

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.room, self.fence, self.current))


class LossReason(StrEnum):
    """Why a lease keeper gave its lease up (``LeaseLost.reason``)."""

    EXPIRED = "expired"
    """No renewal was confirmed before the local deadline (paused process, Redis down)."""
    TAKEN = "taken"
    """Redis answered that the key is gone or holds another owner's token."""


class LeaseLost(ClusterError):
    """The room's Redis lease is no longer held by this owner.

    Reported by :class:`~sync.server.cluster.LeaseKeeper` (through its callback and ``loss``),
    raised by :meth:`~sync.server.cluster.Ownership.check` and by an ownership's fenced
    transaction once the keeper has reported it. ``details``: ``room``, ``token``,
    ``reason`` (a :class:`LossReason` value).
    """

    code = "lease_lost"

    def __init__(self, room: str, token: str, reason: LossReason) -> None:
        super().__init__(
            f"room {room!r}: lease lost ({reason.value})",
            details={"room": room, "token": token, "reason": reason.value},
        )
        self.room = room
        self.token = token
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.room, self.token, self.reason))


class ClusterUnavailable(ClusterError, ConnectionError):
    """Redis or PostgreSQL did not answer (refused, reset, timed out).

    Transient: callers retry. ``details["server"]`` is ``"redis"`` or ``"postgres"``;
    the driver's exception is chained as ``__cause__``.
    """

    code = "cluster_unavailable"

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message, details={"server": server})
        self.server = server

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.server, self.message))


class ClusterSchemaError(ClusterError):
    """The PostgreSQL schema cannot be used by this version (newer, or damaged).

    Nothing is changed in the database when this is raised. ``details``: ``found`` and
    ``known`` schema versions, or ``cluster_id`` (what ``crdt_cluster`` holds) when the
    cluster's id is missing or unusable.
    """

    code = "cluster_schema"
