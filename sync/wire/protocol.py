"""The y-websocket wire protocol plus our branch-merge extension: a pure codec.

No I/O and no pycrdt here: functions turn message objects into the bytes of one websocket
binary message and back. The layouts are written down in ``docs/protocol.md``.

Every message starts with a varuint *message type*:

====  ================  =====================================================
type  message           rest of the message
====  ================  =====================================================
0     sync              varuint step (0 step 1, 1 step 2, 2 update), varbytes
1     awareness         varbytes (an awareness update, relayed opaquely)
2     auth              varuint 0 (permission denied), varstring reason
3     query-awareness   nothing
100   merge (ours)      varuint step (0/2/3 request, 1 result), fields below
====  ================  =====================================================

Stock y-websocket servers ignore types they do not know and stock providers log and drop
them, so type 100 never disturbs a peer that does not speak it. Symmetrically,
:func:`decode_message` returns :class:`UnknownMessage` for unknown types instead of
raising, so a hub can ignore them the same way.

Contract: :func:`decode_message` either returns a message or raises
:class:`~sync.wire.errors.ProtocolError`; it raises nothing else for any input. Encoders raise
:class:`ProtocolError` for arguments that cannot be encoded, so a decoded message always
re-encodes to a message that decodes equal to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sync.wire._ok_result import encode_ok_result
from sync.wire._plain_request import decode_plain_request
from sync.wire.changes import (
    ErrorRecord,
    WireChange,
    WireConflict,
    WirePath,
    decode_change_set,
    decode_result_body,
    encode_change_set,
    encode_result_body,
)
from sync.wire.errors import ErrorCode, ProtocolError
from sync.wire.lib0 import (
    Reader,
    encode_var_bytes,
    encode_var_string,
    encode_var_uint,
)
from sync.wire.messages import (
    MAX_CHAIN,
    MAX_POLICY_BYTES,
    MAX_WRITER_BYTES,
    MERGE_MESSAGE_TYPE,
    AuthStep,
    Awareness,
    MergeReply,
    MergeRequest,
    MergeStatus,
    MergeStep,
    Message,
    MessageType,
    PermissionDenied,
    QueryAwareness,
    SyncStep,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    UnknownMessage,
)
from sync.wire.messages import TOKEN_EXPIRED_REASON as TOKEN_EXPIRED_REASON
from sync.wire.runs import decode_chain, encode_chain
from sync.wire.state_vector import validate_state_vector

__all__ = [
    "MAX_CHAIN",
    "MAX_POLICY_BYTES",
    "MAX_WRITER_BYTES",
    "MERGE_MESSAGE_TYPE",
    "Awareness",
    "MergeRequest",
    "MergeReply",
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
    "decode_message",
    "encode_awareness",
    "encode_merge_request",
    "encode_merge_result",
    "encode_ok_result",
    "encode_message",
    "encode_permission_denied",
    "encode_query_awareness",
    "encode_sync_step1",
    "encode_sync_step2",
    "encode_update",
    "reply_head",
]


# ----------------------------------------------------------------------------- encoding

_SYNC: Final = encode_var_uint(MessageType.SYNC)
_MERGE: Final = encode_var_uint(MessageType.MERGE)


def encode_sync_step1(state_vector: bytes) -> bytes:
    """Encode sync step 1 (``00 00 varbytes(sv)``); ``state_vector`` must be well-formed."""
    validate_state_vector(state_vector)
    return _SYNC + encode_var_uint(SyncStep.STEP1) + encode_var_bytes(state_vector)


def encode_sync_step2(update: bytes) -> bytes:
    """Encode sync step 2 (``00 01 varbytes(update)``)."""
    return _SYNC + encode_var_uint(SyncStep.STEP2) + encode_var_bytes(update)


def encode_update(update: bytes) -> bytes:
    """Encode a sync update (``00 02 varbytes(update)``), byte-equal to pycrdt's."""
    return _SYNC + encode_var_uint(SyncStep.UPDATE) + encode_var_bytes(update)


def encode_awareness(payload: bytes) -> bytes:
    """Encode an awareness message (``01 varbytes(payload)``)."""
    return encode_var_uint(MessageType.AWARENESS) + encode_var_bytes(payload)


def encode_query_awareness() -> bytes:
    """Encode a query-awareness message (the single byte ``03``)."""
    return encode_var_uint(MessageType.QUERY_AWARENESS)


def encode_permission_denied(reason: str) -> bytes:
    """Encode an auth permission-denied message (``02 00 varstring(reason)``)."""
    return (
        encode_var_uint(MessageType.AUTH)
        + encode_var_uint(AuthStep.PERMISSION_DENIED)
        + encode_var_string(reason)
    )


def encode_merge_request(
    request_id: int,
    agent: str,
    base: bytes,
    changes: Sequence[WireChange],
    writer: str = "",
    chain: Sequence[int] = (),
    policies: Sequence[tuple[int, str]] = (),
) -> bytes:
    """Encode a merge request (layout in ``docs/protocol.md``).

    With policies it is step 3 (:attr:`MergeStep.POLICY_REQUEST`); else with a
    writer or a chain step 2 (:attr:`MergeStep.WRITER_REQUEST`); without any,
    step 0, the request of earlier versions.
    """
    validate_state_vector(base)
    # checks writer, chain and policies
    MergeRequest(request_id, agent, base, tuple(changes), writer, tuple(chain), tuple(policies))
    full = bool(writer or chain or policies)
    step = (
        MergeStep.POLICY_REQUEST
        if policies
        else MergeStep.WRITER_REQUEST
        if full
        else MergeStep.REQUEST
    )
    parts = [
        _MERGE,
        encode_var_uint(step),
        encode_var_uint(request_id),
        encode_var_string(agent),
        encode_var_bytes(base),
        encode_var_bytes(encode_change_set(changes)),
    ]
    if full:
        parts.append(encode_var_string(writer))
        parts.append(encode_chain(chain))
    if policies:
        parts.append(encode_var_uint(len(policies)))
        for index, name in policies:
            parts.append(encode_var_uint(index))
            parts.append(encode_var_string(name))
    return b"".join(parts)


def encode_merge_result(
    request_id: int,
    status: MergeStatus,
    token: bytes,
    applied: Sequence[WirePath] = (),
    conflicts: Sequence[WireConflict] = (),
    error: ErrorRecord | None = None,
) -> bytes:
    """Encode a merge result; the status rules of :class:`MergeReply` are enforced."""
    result = MergeReply(request_id, status, token, tuple(applied), tuple(conflicts), error)
    return encode_message(result)


def encode_message(message: Message) -> bytes:
    """Encode any message object; ``decode_message(encode_message(m)) == m``."""
    match message:
        case SyncStep1(state_vector):
            return encode_sync_step1(state_vector)
        case SyncStep2(update):
            return encode_sync_step2(update)
        case SyncUpdate(update):
            return encode_update(update)
        case Awareness(payload):
            return encode_awareness(payload)
        case QueryAwareness():
            return encode_query_awareness()
        case PermissionDenied(reason):
            return encode_permission_denied(reason)
        case MergeRequest(request_id, agent, base, changes, writer, chain, policies):
            return encode_merge_request(request_id, agent, base, changes, writer, chain, policies)
        case MergeReply():
            validate_state_vector(message.token)
            return b"".join(
                (
                    _MERGE,
                    encode_var_uint(MergeStep.RESULT),
                    encode_var_uint(message.request_id),
                    encode_var_uint(message.status),
                    encode_var_bytes(message.token),
                    encode_var_bytes(
                        encode_result_body(message.applied, message.conflicts, message.error)
                    ),
                )
            )
        case UnknownMessage(message_type, payload):
            if message_type in _KNOWN_TYPES:
                raise ProtocolError(ErrorCode.INVALID_VALUE, f"type {message_type} is not unknown")
            return encode_var_uint(message_type) + bytes(payload)
    raise ProtocolError(ErrorCode.INVALID_VALUE, f"not a message: {type(message).__name__}")


# ----------------------------------------------------------------------------- decoding


def reply_head(frame: bytes) -> tuple[int, MergeStatus] | None:
    """The request id and status of a merge result frame, read from its header only.

    The header is ``MERGE RESULT varuint(request_id) varuint(status)``; the token and
    the JSON body after it are not read (a few hundred nanoseconds instead of a full
    :func:`decode_message`). ``None`` for anything that is not a merge result.
    """
    reader = Reader(frame)
    try:
        if reader.read_var_uint() != MessageType.MERGE:
            return None
        if reader.read_var_uint() != MergeStep.RESULT:
            return None
        request_id = reader.read_var_uint()
        return request_id, MergeStatus(reader.read_var_uint())
    except (ProtocolError, ValueError):
        return None


_KNOWN_TYPES: Final = frozenset(int(t) for t in MessageType)


def decode_message(data: bytes) -> Message:
    """Decode one whole websocket binary message.

    Raises :class:`ProtocolError` and nothing else: ``unsupported_frame`` for a ``str``
    (a text frame), ``empty_message``, ``truncated``, ``trailing_bytes``, bad varuints,
    unknown substeps, malformed state vectors or JSON payloads (see
    :class:`~sync.wire.errors.ErrorCode`). Unknown outer types are returned as
    :class:`UnknownMessage`.

    A merge request of the common shape is read by a one-pass decoder
    (:func:`~sync.wire._plain_request.decode_plain_request`) that answers exactly as
    this general one would; everything else takes the general path.
    """
    request = decode_plain_request(data)
    if request is not None:
        return request
    return _decode_general(data)


def _decode_general(data: bytes) -> Message:
    """:func:`decode_message` without its fast path for common merge requests."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_FRAME,
            f"expected a binary message, got {type(data).__name__}",
        )
    if not data:
        raise ProtocolError(ErrorCode.EMPTY_MESSAGE, "empty message")
    reader = Reader(data)
    message_type = reader.read_var_uint()
    message: Message
    if message_type == MessageType.SYNC:
        message = _decode_sync(reader)
    elif message_type == MessageType.AWARENESS:
        message = Awareness(reader.read_var_bytes())
    elif message_type == MessageType.AUTH:
        step = reader.read_var_uint()
        if step != AuthStep.PERMISSION_DENIED:
            raise ProtocolError(ErrorCode.UNKNOWN_AUTH_STEP, f"unknown auth step {step}")
        message = PermissionDenied(reader.read_var_string())
    elif message_type == MessageType.QUERY_AWARENESS:
        message = QueryAwareness()
    elif message_type == MessageType.MERGE:
        message = _decode_merge(reader)
    else:
        return UnknownMessage(message_type, reader.read_rest())
    reader.expect_end()
    return message


def _decode_sync(reader: Reader) -> Message:
    step = reader.read_var_uint()
    if step == SyncStep.STEP1:
        return SyncStep1(validate_state_vector(reader.read_var_bytes()))
    if step == SyncStep.STEP2:
        return SyncStep2(reader.read_var_bytes())
    if step == SyncStep.UPDATE:
        return SyncUpdate(reader.read_var_bytes())
    raise ProtocolError(ErrorCode.UNKNOWN_SYNC_STEP, f"unknown sync step {step}")


def _decode_merge(reader: Reader) -> Message:
    step = reader.read_var_uint()
    if step in (MergeStep.REQUEST, MergeStep.WRITER_REQUEST, MergeStep.POLICY_REQUEST):
        request_id = reader.read_var_uint()
        agent = reader.read_var_string()
        base = validate_state_vector(reader.read_var_bytes())
        changes = decode_change_set(reader.read_var_bytes())
        if step == MergeStep.REQUEST:
            return MergeRequest(request_id, agent, base, changes)
        writer = reader.read_var_string()
        chain = decode_chain(reader)
        policies: list[tuple[int, str]] = []
        if step == MergeStep.POLICY_REQUEST:
            count = reader.read_var_uint()
            if count > len(changes):
                raise ProtocolError(ErrorCode.INVALID_MERGE_REQUEST, "more policies than changes")
            for _ in range(count):
                policies.append((reader.read_var_uint(), reader.read_var_string()))
        return MergeRequest(request_id, agent, base, changes, writer, chain, tuple(policies))
    if step == MergeStep.RESULT:
        request_id = reader.read_var_uint()
        raw_status = reader.read_var_uint()
        try:
            status = MergeStatus(raw_status)
        except ValueError:
            raise ProtocolError(
                ErrorCode.UNKNOWN_STATUS, f"unknown merge status {raw_status}"
            ) from None
        token = validate_state_vector(reader.read_var_bytes())
        applied, conflicts, error = decode_result_body(reader.read_var_bytes())
        return MergeReply(request_id, status, token, applied, conflicts, error)
    raise ProtocolError(ErrorCode.UNKNOWN_MERGE_STEP, f"unknown merge step {step}")
