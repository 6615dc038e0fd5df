"""Network side of crdt-state: a websocket sync hub, remote agents, the wire protocol.

- :class:`Hub`: an asyncio websocket server of rooms, speaking y-websocket
  (stock Yjs clients join) plus a branch-merge extension.
- :func:`connect`: a remote agent's live replica of a room, with the
  fork/merge API of :class:`crdt_state.SharedState`, working offline too;
  :func:`connect_blocking` is the same for threaded code.
- :mod:`sync.wire.protocol`: the pure codec; ``docs/protocol.md`` has the layouts.
"""

from sync.client.blocking import BlockingBranch, BlockingRemote, connect_blocking
from sync.client.remote import RemoteBranch, RemoteError, RemoteState, RemoteToken, connect
from sync.server.auth import AuthError, Grant, mint_token, verify_token
from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.wire.changes import (
    MISSING,
    Change,
    ChangeKind,
    ConflictRecord,
    ErrorRecord,
    JsonValue,
    Missing,
    Path,
)
from sync.wire.errors import CloseCode, ErrorCode, ProtocolError, SyncError
from sync.wire.protocol import (
    MERGE_MESSAGE_TYPE,
    Awareness,
    MergeRequest,
    MergeResult,
    MergeStatus,
    Message,
    MessageType,
    PermissionDenied,
    QueryAwareness,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    UnknownMessage,
    decode_message,
    encode_message,
)

__all__ = [
    "AuthError",
    "BlockingBranch",
    "BlockingRemote",
    "connect_blocking",
    "Grant",
    "Hub",
    "Limits",
    "RemoteBranch",
    "RemoteError",
    "RemoteState",
    "RemoteToken",
    "connect",
    "mint_token",
    "verify_token",
    "MERGE_MESSAGE_TYPE",
    "MISSING",
    "Awareness",
    "Change",
    "ChangeKind",
    "CloseCode",
    "ConflictRecord",
    "ErrorCode",
    "ErrorRecord",
    "JsonValue",
    "MergeRequest",
    "MergeResult",
    "MergeStatus",
    "Message",
    "MessageType",
    "Missing",
    "Path",
    "PermissionDenied",
    "ProtocolError",
    "QueryAwareness",
    "SyncError",
    "SyncStep1",
    "SyncStep2",
    "SyncUpdate",
    "UnknownMessage",
    "decode_message",
    "encode_message",
]
