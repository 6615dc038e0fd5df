"""The exceptions of the ``sync`` package, and the websocket close codes they map to.

Hierarchy::

    SyncError                               root of every error ``sync`` raises
    ├── ProtocolError(ValueError)           bytes that are not a valid message of the wire
    │                                       protocol, or a value that cannot be encoded
    ├── RemoteError(crdt_state.CrdtStateError)
    │   │                                   the hub refused a merge (``code``: the hub's code)
    │   └── WriteDenied(PermissionError)    a merge on a read-only connection (``read_only``)
    ├── HubUnreachable(ConnectionError)     no hub could be synced with in time
    ├── InvalidHubURL(ValueError)           a hub URL that cannot name a room
    ├── UnsentMerges                        a client closed with merges it cannot keep
    ├── LocalFileError                      a client's ``local`` file cannot be used
    │   ├── LocalFileInUse                  another client holds it (``local_file_in_use``)
    │   └── LocalFileWrongRoom              it belongs to another room
    │                                       (``local_file_wrong_room``)
    ├── sync.server.auth.AuthError(PermissionError)
    │                                       an access token was refused (``http_status``)
    └── sync.server.peer.PeerRefused        a connection must be closed (``close_code``)

Every error has one meaning of ``code``: a stable, machine-readable string (agents and
tests match on it, never on the message). Transport details are separate fields:
``close_code`` (the websocket close code), ``http_status`` (the handshake's HTTP status).
"""

from __future__ import annotations

import enum
from typing import Final

from crdt_state import CrdtStateError

__all__ = [
    "AuthError",
    "CloseCode",
    "ErrorCode",
    "HubUnreachable",
    "UnsentMerges",
    "InvalidHubURL",
    "LocalFileError",
    "LocalFileInUse",
    "LocalFileWrongRoom",
    "ProtocolError",
    "RemoteError",
    "SyncError",
    "WriteDenied",
]

_MAX_CLOSE_REASON_BYTES: Final = 123  # RFC 6455 section 5.5: 125-byte control frame - 2-byte code


class CloseCode(enum.IntEnum):
    """Websocket close codes (RFC 6455 section 7.4.1) used by the hub and its clients."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    """Malformed frame: truncated, bad varuint, trailing bytes, bad JSON, unknown substep."""
    UNSUPPORTED_DATA = 1003
    """Well-formed but unsupported: a text frame, an unknown enum value of a newer peer."""
    POLICY_VIOLATION = 1008
    """Access refused: bad or missing token, a write from a read-only connection."""
    MESSAGE_TOO_BIG = 1009
    """A message or a document over the configured size limit."""
    INTERNAL_ERROR = 1011


class ErrorCode(enum.StrEnum):
    """Stable codes of :class:`ProtocolError`; the value is what gets logged and compared."""

    EMPTY_MESSAGE = "empty_message"
    TRUNCATED = "truncated"
    VARUINT_OVERFLOW = "varuint_overflow"
    NON_CANONICAL_VARUINT = "non_canonical_varuint"
    TRAILING_BYTES = "trailing_bytes"
    INVALID_UTF8 = "invalid_utf8"
    UNKNOWN_SYNC_STEP = "unknown_sync_step"
    UNKNOWN_AUTH_STEP = "unknown_auth_step"
    UNKNOWN_MERGE_STEP = "unknown_merge_step"
    INVALID_STATE_VECTOR = "invalid_state_vector"
    INVALID_JSON = "invalid_json"
    INVALID_CHANGE_SET = "invalid_change_set"
    INVALID_RESULT_BODY = "invalid_result_body"
    INVALID_MERGE_REQUEST = "invalid_merge_request"
    UNKNOWN_CHANGE_KIND = "unknown_change_kind"
    UNKNOWN_STATUS = "unknown_status"
    UNSUPPORTED_FRAME = "unsupported_frame"
    INVALID_VALUE = "invalid_value"

    @property
    def close_code(self) -> CloseCode:
        """The close code a server sends when a peer's bytes fail with this code."""
        return _CLOSE_CODES.get(self, CloseCode.PROTOCOL_ERROR)


_CLOSE_CODES: Final[dict[ErrorCode, CloseCode]] = {
    ErrorCode.UNKNOWN_CHANGE_KIND: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.UNKNOWN_STATUS: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.UNSUPPORTED_FRAME: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.INVALID_VALUE: CloseCode.UNSUPPORTED_DATA,
}


class SyncError(Exception):
    """Root of every exception raised by the ``sync`` package.

    Attributes:
        code: a stable machine-readable string naming what went wrong.
    """

    code: str = "sync_error"


class AuthError(SyncError, PermissionError):
    """An access token was refused (by the hub's check, or the hub refused a client's).

    Attributes:
        code: why, as a stable string (``missing_token``, ``malformed_token``,
            ``bad_signature``, ``expired_token``, ``wrong_room``; a client whose
            handshake the hub refused gets ``token_refused``).
        http_status: the HTTP status the handshake is refused with (401 or 403).
        reason: for people.
    """

    def __init__(self, http_status: int, code: str, reason: str) -> None:
        super().__init__(reason)
        self.http_status = http_status
        self.code = code
        self.reason = reason


class InvalidHubURL(SyncError, ValueError):
    """A hub URL that is not ``ws://`` or ``wss://`` (code ``invalid_url``)."""

    code = "invalid_url"


class ProtocolError(SyncError, ValueError):
    """Bytes that violate the wire protocol, or a value the protocol cannot carry.

    Decoders raise it for every malformed input and never raise anything else; encoders
    raise it (code :attr:`ErrorCode.INVALID_VALUE` or a more specific one) for arguments
    that cannot be encoded. ``code`` is stable; ``reason`` is for people.
    """

    PROTOCOL_ERROR: Final = CloseCode.PROTOCOL_ERROR
    UNSUPPORTED_DATA: Final = CloseCode.UNSUPPORTED_DATA

    code: ErrorCode

    def __init__(self, code: ErrorCode, reason: str) -> None:
        self.code = code
        self.reason: Final = reason
        super().__init__(f"{code.value}: {reason}")

    @property
    def close_code(self) -> CloseCode:
        """Websocket close code for this error: 1002 (malformed) or 1003 (unsupported)."""
        return self.code.close_code

    @property
    def close_reason(self) -> str:
        """``str(self)`` cut to fit a close frame (at most 123 UTF-8 bytes, whole chars)."""
        raw = str(self).encode("utf-8")[:_MAX_CLOSE_REASON_BYTES]
        return raw.decode("utf-8", errors="ignore")

    def __reduce__(self) -> tuple[type[ProtocolError], tuple[ErrorCode, str]]:
        return (type(self), (self.code, self.reason))


class RemoteError(SyncError, CrdtStateError):
    """The hub refused a merge for a reason other than a conflict.

    It is also a :class:`~crdt_state.CrdtStateError`, as every other way a merge can fail.

    Attributes:
        code: the hub's error code (``document_too_large``, ``wrong_type``,
            ``broken_chain``, ...); ``details["hub_code"]`` repeats it.
    """

    code = "remote_error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, details={"hub_code": code})
        self.code = code


class WriteDenied(RemoteError, PermissionError):
    """The hub refused a merge because the connection may only read (code ``read_only``).

    The merge is final (it is not sent again) and ``details`` keeps what it would have
    written: ``agent``, ``request_id`` and ``paths`` (the paths its changes touch).
    Reads go on; later merges of the same client fail at once with this error.
    """

    code = "read_only"

    def __init__(self, message: str, *, details: dict[str, object] | None = None) -> None:
        super().__init__("read_only", message)
        self.details.update(details or {})


class HubUnreachable(SyncError, ConnectionError):
    """No hub of the room could be synced with before the timeout (code ``hub_unreachable``).

    Attributes:
        urls: the hub URLs tried (tokens masked).
        timeout: how long the client tried, in seconds.
        last_error: why the last attempt failed, for people (tokens masked).
    """

    code = "hub_unreachable"

    def __init__(self, urls: tuple[str, ...], timeout: float, last_error: str) -> None:
        self.urls = urls
        self.timeout = timeout
        self.last_error = last_error
        where = " or ".join(urls)
        super().__init__(f"could not sync with {where} in {timeout:g} s (last: {last_error})")


class UnsentMerges(SyncError):
    """A client closed while merges had not reached the hub, with nowhere to keep them.

    Code ``unsent_merges``. Raised by closing a client without a ``local`` file (the
    end of ``async with sync.connect(...)``, ``close()``) after it waited for them (see
    :meth:`~sync.client.remote.RemoteState.close`). Their outcome is unknown: one sent
    before the connection dropped may still be applied by a hub (at most once), the others
    never will be, since no one will send them again. Do not re-send them blindly: read
    the room first. Each merge whose caller was still waiting had already ended as
    ``pending``.

    Attributes:
        agent: the client's agent.
        count: how many merges had no acknowledgement.
        urls: the hub URLs (tokens masked).
        why: why the client was not connected when it closed (the last connection
            problem, e.g. the hub refusing an expired token), or ``None``.
    """

    code = "unsent_merges"

    def __init__(
        self, agent: str, count: int, urls: tuple[str, ...], why: str | None = None
    ) -> None:
        self.agent = agent
        self.count = count
        self.urls = urls
        self.why = why
        super().__init__(
            f"agent {agent!r} closed with {count} merge(s) that no hub of {' or '.join(urls)}"
            " acknowledged"
            + (f" (not connected: {why})" if why else "")
            + "; without a local file they will not be sent again, but one already"
            " sent may still be applied (at most once): read the room before redoing them"
            " (wait with remote.wait_idle(), or give connect() local=FILE to keep them"
            " queued)"
        )


class LocalFileError(SyncError):
    """A client's ``local`` file that it may not use; raised before anything is sent.

    Raised by :func:`sync.connect` and :func:`sync.connect_blocking` (by creating the
    client) before any connection is made: nothing was sent to a hub, and nothing was
    written to the file. See :class:`LocalFileInUse` and :class:`LocalFileWrongRoom`.

    Attributes:
        file: the file, as given to ``local=``.
    """

    code = "local_file_error"

    def __init__(self, file: str, message: str) -> None:
        self.file = file
        super().__init__(message)


class LocalFileInUse(LocalFileError):
    """Another client holds the ``local`` file (code ``local_file_in_use``).

    One file serves one client at a time: two clients on one file would share its writer
    id and request ids, and the hub would deduplicate one client's merges away. The
    holder is another client of this process (close it first) or another process (it
    holds the file until it closes its client or ends, a crash included).

    Attributes:
        file: the file, as given to ``local=``.
        pid: the holder's process id when the system tells (Linux), else ``None``.
    """

    code = "local_file_in_use"

    def __init__(self, file: str, pid: int | None = None, *, this_process: bool = False) -> None:
        self.pid = pid
        self.this_process = this_process
        """True when the holder is another client of this process."""
        if this_process:
            holder = f"another client of this process (pid {pid})"
            fix = "close that client first, or give each client a file of its own"
        else:
            holder = "another process" + ("" if pid is None else f" (pid {pid})")
            fix = "give each agent a file of its own, or stop that process first"
        super().__init__(
            file,
            f"the local file {file!r} is in use by {holder}: a local file serves one client"
            f" at a time (two would share its writer id and lose merges); {fix}",
        )


class LocalFileWrongRoom(LocalFileError):
    """The ``local`` file belongs to another room (code ``local_file_wrong_room``).

    A local file keeps the replica and the queued merges of one room: the room named by
    the URL path of its first client (the host may differ: a cluster serves a room from
    several hubs). Opened for another room it would copy them into that room, so it is
    refused and left as it is.

    Attributes:
        file: the file, as given to ``local=``.
        room: the room the client was asked to join.
        file_room: the room the file belongs to.
    """

    code = "local_file_wrong_room"

    def __init__(self, file: str, room: str, file_room: str) -> None:
        self.room = room
        self.file_room = file_room
        super().__init__(
            file,
            f"the local file {file!r} belongs to room {file_room!r}, not to room {room!r}:"
            " it keeps that room's replica and queued merges; give this client another"
            " file (this one was not changed)",
        )
