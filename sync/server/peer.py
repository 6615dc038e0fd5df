"""The hub's side of one client connection, sans I/O: frames in, events out.

:class:`HubPeer` turns each websocket message from a client into one event
for the hub to act on, or refuses it with :class:`PeerRefused`, which names
the close code and reason the connection must be closed with. It checks
everything that needs no state: framing, message syntax, state vectors, and
what a read-only connection may send. The asyncio layer (:mod:`sync.server.hub`)
pumps a socket through it and carries out the events against the room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from crdt_state import InvalidUpdate, VersionVector
from sync.wire import protocol as p
from sync.wire.errors import CloseCode, ErrorCode, ProtocolError, SyncError

__all__ = [
    "EMPTY_UPDATE",
    "READ_ONLY",
    "AwarenessQueried",
    "AwarenessReceived",
    "HubPeer",
    "MergeDenied",
    "MergeRequested",
    "PeerEvent",
    "PeerRefused",
    "SyncRequested",
    "READ_ONLY_WRITES",
    "UpdateDenied",
    "UpdateReceived",
]

EMPTY_UPDATE: Final = b"\x00\x00"
"""A Yjs update with no structs and no deletions."""


@dataclass(frozen=True, slots=True)
class SyncRequested:
    """Sync step 1: answer with step 2, everything the peer lacks beyond ``since``."""

    since: VersionVector


@dataclass(frozen=True, slots=True)
class UpdateReceived:
    """Sync step 2 or an update from a writer: apply it to the room."""

    update: bytes


@dataclass(frozen=True, slots=True)
class UpdateDenied:
    """A Yjs update from a read-only connection: dropped, nothing of it applied.

    The hub tells the peer once (a permission-denied message) and keeps the connection
    open for reads: a stock y-websocket client that was closed reconnected at once and
    sent its write again, for as long as it ran.
    """


@dataclass(frozen=True, slots=True)
class AwarenessReceived:
    """An awareness payload: keep it for later joiners and relay it to the others."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class AwarenessQueried:
    """The peer asks for every awareness payload the room holds."""


@dataclass(frozen=True, slots=True)
class MergeRequested:
    """A branch merge (the extension message) from a writer.

    ``frame`` is the message as received (a cluster hub forwards it unchanged instead of
    encoding ``request`` again).
    """

    request: p.MergeRequest
    frame: bytes = b""


@dataclass(frozen=True, slots=True)
class MergeDenied:
    """A merge request from a read-only connection.

    The hub answers it with an error result (code ``read_only``) and keeps the
    connection open for reads.
    """

    request: p.MergeRequest


PeerEvent: TypeAlias = (
    SyncRequested
    | UpdateReceived
    | UpdateDenied
    | AwarenessReceived
    | AwarenessQueried
    | MergeRequested
    | MergeDenied
)


class PeerRefused(SyncError):
    """The connection must be closed with ``close_code`` and ``reason``.

    Attributes:
        code: why, as a stable string (a :class:`~sync.wire.errors.ErrorCode` value
            for a malformed message, ``read_only``, ``document_too_large``,
            ``update_refused``).
        close_code: the websocket close code to close the connection with.
        reason: for people (and the close frame), at most 120 characters.
    """

    def __init__(self, code: str, reason: str, *, close_code: int) -> None:
        super().__init__(reason)
        self.code = code
        self.close_code = close_code
        self.reason = reason[:120]

    @property
    def permission_denied(self) -> bool:
        """True when the peer should first get a y-protocols permission-denied message.

        Stock clients log its reason.
        """
        return self.close_code == CloseCode.POLICY_VIOLATION


READ_ONLY: Final = "read_only"
"""The code of :class:`PeerRefused` for a Yjs update from a read-only connection, and
the error code of the result answering its merge requests (:class:`MergeDenied`)."""


READ_ONLY_WRITES: Final = "read-only token: writes are refused"
"""The permission-denied reason a read-only connection's first Yjs update gets."""


class HubPeer:
    """Protocol state of one connection: what it may send, and what its messages mean."""

    def __init__(self, *, can_write: bool) -> None:
        self.can_write = can_write

    @staticmethod
    def greeting(token: VersionVector, awareness: list[bytes]) -> list[bytes]:
        """The frames a new connection gets: sync step 1, then the room's awareness."""
        return [p.encode_sync_step1(token.to_state()), *map(p.encode_awareness, awareness)]

    def receive(self, data: bytes | str) -> PeerEvent | None:
        """The event one message stands for (``None``: nothing to do).

        Raises :class:`PeerRefused` for a text frame (1003) or a malformed message
        (1002/1003). From a read-only connection, a Yjs update is :class:`UpdateDenied`
        and a merge request :class:`MergeDenied`, both refused without closing.
        """
        if isinstance(data, str):
            raise PeerRefused(
                ErrorCode.UNSUPPORTED_FRAME,
                "text frames are not supported",
                close_code=CloseCode.UNSUPPORTED_DATA,
            )
        try:
            message = p.decode_message(data)
        except ProtocolError as exc:
            raise PeerRefused(exc.code, exc.close_reason, close_code=exc.close_code) from exc
        if isinstance(message, p.SyncStep1):
            try:
                return SyncRequested(VersionVector.from_state(message.state_vector, strict=True))
            except InvalidUpdate as exc:
                raise PeerRefused(
                    ErrorCode.INVALID_STATE_VECTOR,
                    "bad state vector",
                    close_code=CloseCode.PROTOCOL_ERROR,
                ) from exc
        if isinstance(message, (p.SyncStep2, p.SyncUpdate)):
            if self.can_write:
                return UpdateReceived(message.update)
            if message.update == EMPTY_UPDATE:
                return None  # a read-only peer answering sync step 1 with nothing
            return UpdateDenied()
        if isinstance(message, p.Awareness):
            return AwarenessReceived(message.payload)
        if isinstance(message, p.QueryAwareness):
            return AwarenessQueried()
        if isinstance(message, p.MergeRequest):
            if not self.can_write:
                return MergeDenied(message)
            return MergeRequested(message, bytes(data))
        return None  # results, permission-denied and unknown types from clients
