"""The wire layer: the y-websocket protocol plus the merge extension, as a pure codec.

Bytes in, message objects out, and the reverse; no asyncio, no sockets. Layouts are in
``docs/protocol.md``.

- :mod:`sync.wire.lib0`: varuint, varbytes, varstring (strict decoder);
- :mod:`sync.wire.state_vector`: Yjs state vectors (the tokens): the core's strict decoder
  with the wire's error code;
- :mod:`sync.wire.changes`: the JSON payloads (change sets, merge result bodies);
- :mod:`sync.wire.protocol`: messages and their codec;
- :mod:`sync.wire.awareness`: awareness updates and their clock rules (y-protocols);
- :mod:`sync.wire.convert`: wire records to and from the core's objects;
- :mod:`sync.wire.errors`: the ``sync`` error root and the wire's codes.
"""

from sync.wire.changes import (
    MISSING,
    ChangeKind,
    ErrorRecord,
    JsonValue,
    Missing,
    WireChange,
    WireConflict,
    WirePath,
)
from sync.wire.errors import (
    AuthError,
    CloseCode,
    ErrorCode,
    HubUnreachable,
    InvalidHubURL,
    LocalFileError,
    LocalFileInUse,
    LocalFileWrongRoom,
    ProtocolError,
    RemoteError,
    SyncError,
    UnsentMerges,
    WriteDenied,
)
from sync.wire.protocol import (
    MERGE_MESSAGE_TYPE,
    Awareness,
    MergeReply,
    MergeRequest,
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
    "MERGE_MESSAGE_TYPE",
    "MISSING",
    "Awareness",
    "WireChange",
    "ChangeKind",
    "CloseCode",
    "WireConflict",
    "ErrorCode",
    "ErrorRecord",
    "JsonValue",
    "MergeRequest",
    "MergeReply",
    "MergeStatus",
    "Message",
    "MessageType",
    "Missing",
    "WirePath",
    "PermissionDenied",
    "InvalidHubURL",
    "HubUnreachable",
    "UnsentMerges",
    "LocalFileError",
    "LocalFileInUse",
    "LocalFileWrongRoom",
    "WriteDenied",
    "ProtocolError",
    "QueryAwareness",
    "RemoteError",
    "SyncError",
    "SyncStep1",
    "SyncStep2",
    "SyncUpdate",
    "UnknownMessage",
    "decode_message",
    "encode_message",
]
