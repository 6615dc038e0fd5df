"""The messages of the y-websocket protocol plus our merge extension, as plain data.

One class per message; :mod:`sync.wire.protocol` turns them into bytes and back
(``docs/protocol.md`` has the layouts). Construction checks what a message must satisfy
whatever its encoding (merge requests: chain and policies; merge replies: the status
rules) and raises :class:`~sync.wire.errors.ProtocolError` otherwise.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass
from itertools import pairwise, repeat
from typing import Final, TypeAlias

from sync.wire.changes import ErrorRecord, WireChange, WireConflict, WirePath
from sync.wire.errors import ErrorCode, ProtocolError

__all__ = [
    "MAX_CHAIN",
    "MAX_POLICY_BYTES",
    "MAX_WRITER_BYTES",
    "MERGE_MESSAGE_TYPE",
    "AuthStep",
    "Awareness",
    "MergeReply",
    "MergeRequest",
    "MergeStatus",
    "MergeStep",
    "Message",
    "MessageType",
    "PermissionDenied",
    "QueryAwareness",
    "SyncStep",
    "SyncStep1",
    "SyncStep2",
    "SyncUpdate",
    "UnknownMessage",
    "TOKEN_EXPIRED_REASON",
]


class MessageType(enum.IntEnum):
    """Outer message types (the first varuint of every message)."""

    SYNC = 0
    AWARENESS = 1
    AUTH = 2
    QUERY_AWARENESS = 3
    MERGE = 100
    """Our extension. 4-99 are left free: other y-websocket servers use small numbers."""


MERGE_MESSAGE_TYPE: Final = MessageType.MERGE

MAX_WRITER_BYTES: Final = 64
"""Longest writer identity a merge request may carry (UTF-8 bytes)."""

MAX_CHAIN: Final = 100_000
"""Most earlier requests a merge request may build on (as many as a hub remembers)."""
MAX_POLICY_BYTES: Final = 32
"""The longest policy name a merge request may carry."""


class SyncStep(enum.IntEnum):
    """Second varuint of a sync message (y-protocols ``sync.js``)."""

    STEP1 = 0
    STEP2 = 1
    UPDATE = 2


class AuthStep(enum.IntEnum):
    """Second varuint of an auth message (y-protocols ``auth.js``)."""

    PERMISSION_DENIED = 0


class MergeStep(enum.IntEnum):
    """Second varuint of a merge message."""

    REQUEST = 0
    """A merge request without writer or chain (older and minimal clients)."""
    RESULT = 1
    WRITER_REQUEST = 2
    """A merge request that names its writer and the earlier requests it builds on."""
    POLICY_REQUEST = 3
    """Step 2 plus the client's named policies for some of its changes."""


class MergeStatus(enum.IntEnum):
    """Outcome of a merge request.

    * ``OK``: merged; no conflicts, no error.
    * ``CONFLICT``: one or more conflicts (listed, each with its resolution); ``applied``
      says what was written, possibly nothing (e.g. a conflict routed to retry).
    * ``ERROR``: nothing was written; ``error`` says why (conflicts may be listed too).
    """

    OK = 0
    CONFLICT = 1
    ERROR = 2


# ----------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class SyncStep1:
    """A peer's state vector: "send me what I miss". Answer with :class:`SyncStep2`."""

    state_vector: bytes


@dataclass(frozen=True, slots=True)
class SyncStep2:
    """Answer to :class:`SyncStep1`: a Yjs update with everything the asker missed."""

    update: bytes


@dataclass(frozen=True, slots=True)
class SyncUpdate:
    """A Yjs update made after the initial sync (opaque here; validate before applying)."""

    update: bytes


@dataclass(frozen=True, slots=True)
class Awareness:
    """An awareness update: opaque bytes, relayed as-is."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class QueryAwareness:
    """A request for every awareness state the peer knows. Carries nothing."""


@dataclass(frozen=True, slots=True)
class PermissionDenied:
    """y-protocols auth message: the peer refused access. Stock providers log ``reason``.

    A hub sends :data:`TOKEN_EXPIRED_REASON` when the connection's token expired (then
    closes with 1008): not a refusal of writes, the client needs a fresh token.
    """

    reason: str


TOKEN_EXPIRED_REASON: Final = "access token expired"
"""The reason of the permission-denied message (and 1008 close) of an expired token."""


@dataclass(frozen=True, slots=True)
class MergeRequest:
    """A branch asks the hub to merge its changes.

    ``request_id`` is chosen by the client and echoed in the :class:`MergeReply`;
    ``base`` is the branch's fork-base token (a Yjs state vector, validated on both
    encode and decode); ``changes`` are applied in order. ``writer`` is the stable
    identity of the sending client (``""``: none; the hub then scopes the request to
    the connection): requests are deduplicated by ``(writer, request_id)``.
    ``chain`` lists, in increasing order, the ids of earlier requests of the same
    writer that the changes were computed on top of (see ``docs/protocol.md``); it
    travels as runs of consecutive ids. ``policies`` pairs the index of a change with
    the name of the client's policy for its path, one of
    :data:`~crdt_state.resolvers.NAMED_POLICIES` (a hub settles a conflict there with
    it when the room has no rule of its own; other names are ignored); indexes strictly
    increase. Construction checks the writer's length, that the chain is strictly
    increasing and at most :data:`MAX_CHAIN` long, and the policies' indexes and name
    lengths (:class:`ProtocolError`, ``invalid_merge_request``).
    """

    request_id: int
    agent: str
    base: bytes
    changes: tuple[WireChange, ...]
    writer: str = ""
    chain: tuple[int, ...] = ()
    policies: tuple[tuple[int, str], ...] = ()

    def __post_init__(self) -> None:
        if not (self.policies or self.writer or self.chain):
            return  # a plain request: every rule below holds for empty fields
        bad = ErrorCode.INVALID_MERGE_REQUEST
        indexes = [i for i, _ in self.policies]
        if any(not isinstance(i, int) or not 0 <= i < len(self.changes) for i in indexes):
            raise ProtocolError(bad, "policy index names no change of the request")
        if any(a >= b for a, b in pairwise(indexes)):
            raise ProtocolError(bad, "policy indexes must be strictly increasing")
        if any(
            len(n.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES for _, n in self.policies
        ):
            raise ProtocolError(bad, f"policy name longer than {MAX_POLICY_BYTES} bytes")
        if len(self.writer.encode("utf-8", "surrogatepass")) > MAX_WRITER_BYTES:
            raise ProtocolError(bad, f"writer longer than {MAX_WRITER_BYTES} bytes")
        if len(self.chain) > MAX_CHAIN:
            raise ProtocolError(bad, f"chain longer than {MAX_CHAIN} requests")
        # map() over builtins: a chain of thousands of ids (an agent's queued merges)
        # is checked at C speed, ~10x a generator's
        chain = self.chain
        if not all(map(isinstance, chain, repeat(int))) or (chain and min(chain) < 0):
            raise ProtocolError(bad, "chain ids must be unsigned integers")
        if not all(map(operator.lt, chain, chain[1:])):
            raise ProtocolError(bad, "chain ids must be strictly increasing")


@dataclass(frozen=True, slots=True)
class MergeReply:
    """The hub's answer to :class:`MergeRequest` with the same ``request_id``.

    ``token`` is the room's state vector right after the merge (or at refusal).
    Construction enforces the :class:`MergeStatus` rules and raises :class:`ProtocolError`
    (``invalid_result_body``) when status and body disagree.
    """

    request_id: int
    status: MergeStatus
    token: bytes
    applied: tuple[WirePath, ...] = ()
    conflicts: tuple[WireConflict, ...] = ()
    error: ErrorRecord | None = None

    def __post_init__(self) -> None:
        bad = ErrorCode.INVALID_RESULT_BODY
        if self.status is MergeStatus.OK and (self.conflicts or self.error is not None):
            raise ProtocolError(bad, "status ok with conflicts or an error")
        if self.status is MergeStatus.CONFLICT and (not self.conflicts or self.error):
            raise ProtocolError(bad, "status conflict needs conflicts and no error")
        if self.status is MergeStatus.ERROR and (self.error is None or self.applied):
            raise ProtocolError(bad, "status error needs an error and nothing applied")


@dataclass(frozen=True, slots=True)
class UnknownMessage:
    """A message of a type this codec does not know; by convention, ignore it."""

    message_type: int
    payload: bytes


Message: TypeAlias = (
    SyncStep1
    | SyncStep2
    | SyncUpdate
    | Awareness
    | QueryAwareness
    | PermissionDenied
    | MergeRequest
    | MergeReply
    | UnknownMessage
)
