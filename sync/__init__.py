"""Network side of crdt-state: a websocket sync hub, remote agents, the wire protocol.

Three layers (``docs/architecture.md``):

- :mod:`sync.wire`: the pure codec of the y-websocket protocol plus the merge extension
  (``docs/protocol.md`` has the layouts), and the error root :class:`SyncError`;
- :mod:`sync.server`: :class:`Hub`, an asyncio websocket server of rooms speaking
  y-websocket (stock Yjs clients join) plus branch merges;
- :mod:`sync.client`: :func:`connect`, a remote agent's live replica of a room with the
  fork/merge API of :class:`crdt_state.SharedState`, working offline too;
  :func:`connect_blocking` is the same for threaded code.

``server`` and ``client`` never import each other. :mod:`sync.mcp` serves a state to MCP
clients; :mod:`sync.cli` is the ``crdt-state`` command.
"""

from sync.client import (
    BlockingBranch,
    BlockingRemote,
    RemoteBranch,
    RemoteError,
    RemoteState,
    RemoteToken,
    connect,
    connect_blocking,
)
from sync.server import (
    AuthError,
    Grant,
    Hub,
    HubConfigError,
    HubPeer,
    Limits,
    PeerRefused,
    mint_token,
    verify_token,
)
from sync.wire import (
    MERGE_MESSAGE_TYPE,
    MISSING,
    Awareness,
    ChangeKind,
    CloseCode,
    ErrorCode,
    ErrorRecord,
    HubUnreachable,
    InvalidHubURL,
    JsonValue,
    LocalFileError,
    LocalFileInUse,
    LocalFileWrongRoom,
    MergeReply,
    MergeRequest,
    MergeStatus,
    Message,
    MessageType,
    Missing,
    PermissionDenied,
    ProtocolError,
    QueryAwareness,
    SyncError,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    UnknownMessage,
    UnsentMerges,
    WireChange,
    WireConflict,
    WirePath,
    WriteDenied,
    decode_message,
    encode_message,
)

__all__ = [
    "AuthError",
    "HubUnreachable",
    "UnsentMerges",
    "LocalFileError",
    "LocalFileInUse",
    "LocalFileWrongRoom",
    "InvalidHubURL",
    "WriteDenied",
    "BlockingBranch",
    "BlockingRemote",
    "connect_blocking",
    "Grant",
    "Hub",
    "HubConfigError",
    "HubPeer",
    "Limits",
    "PeerRefused",
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
    "ChangeKind",
    "CloseCode",
    "ErrorCode",
    "ErrorRecord",
    "JsonValue",
    "MergeReply",
    "MergeRequest",
    "MergeStatus",
    "Message",
    "MessageType",
    "Missing",
    "PermissionDenied",
    "ProtocolError",
    "QueryAwareness",
    "SyncError",
    "SyncStep1",
    "SyncStep2",
    "SyncUpdate",
    "UnknownMessage",
    "WireChange",
    "WireConflict",
    "WirePath",
    "decode_message",
    "encode_message",
]
