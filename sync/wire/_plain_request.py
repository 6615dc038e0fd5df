"""A hand-written decoder for the common merge request: one pass, no :class:`Reader`.

Almost every message a hub receives from a writing client is a merge request of step 0
(:attr:`MergeStep.REQUEST`) or step 2 (:attr:`MergeStep.WRITER_REQUEST`) with no chain,
whose change set is a JSON array of plain ``set``/``append``/``delete`` objects.
:func:`decode_plain_request` reads exactly that shape in one pass (a quarter of the
calls of the general decoder) and answers ``None`` for anything else: another message
type or step, a chain, a field in an unusual form, any malformed byte. The general
decoder then decides, errors included, so :func:`~sync.wire.protocol.decode_message`
returns the same message or raises the same :class:`ProtocolError` with or without this
path (``tests/sync/wire/test_plain_request_decoder.py`` proves it with Hypothesis).
"""

from __future__ import annotations

from typing import Final, cast

from crdt_state import InvalidUpdate, VersionVector
from sync.wire._strict_json import DECODER
from sync.wire.changes import ChangeKind, JsonValue, WireChange, _is_missing_json
from sync.wire.errors import ProtocolError
from sync.wire.lib0 import MAX_VAR_UINT
from sync.wire.messages import MergeRequest

__all__ = ["decode_plain_request"]

_MERGE_BYTE: Final = 100  # MessageType.MERGE, a one-byte varuint
_REQUEST: Final = 0  # MergeStep.REQUEST
_WRITER_REQUEST: Final = 2  # MergeStep.WRITER_REQUEST
_VALUE_KEYS: Final = frozenset(("kind", "path", "value"))
_DELETE_KEYS: Final = frozenset(("kind", "path"))
_KINDS: Final = {"set": ChangeKind.SET, "append": ChangeKind.APPEND}


def _uint(data: bytes, pos: int) -> tuple[int, int]:
    """A canonical varuint of at most ``2**53 - 1`` at ``pos``: ``(value, next)``.

    ``(-1, pos)`` for anything else (truncated, over-long, non-canonical, too large).
    """
    value = shift = 0
    end = len(data)
    while pos < end and shift < 56:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if (byte == 0 and shift) or value > MAX_VAR_UINT:
                return -1, pos
            return value, pos
        shift += 7
    return -1, pos


def _string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A varstring at ``pos``: ``(text, next)``, or ``(None, pos)`` if not a good one."""
    length, pos = _uint(data, pos)
    end = pos + length
    if length < 0 or end > len(data):
        return None, pos
    try:
        return data[pos:end].decode("utf-8"), end
    except UnicodeDecodeError:
        return None, pos


def _changes(body: bytes) -> tuple[WireChange, ...] | None:
    """The change set in ``body`` when every change is a plain object, else ``None``.

    Plain: ``{"kind": "set"|"append", "path": [str, ...], "value": v}`` with ``v`` not
    the missing sentinel, or ``{"kind": "delete", "path": [...]}``; the keys in any
    order, each once (the shared decoder refuses duplicates and non-finite numbers).
    """
    try:
        items: JsonValue = DECODER.decode(body.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if type(items) is not list:
        return None
    changes: list[WireChange] = []
    for item in items:
        if type(item) is not dict:
            return None
        path = item.get("path")
        if type(path) is not list or not path:
            return None
        for key in path:
            if type(key) is not str:
                return None
        keys = cast("tuple[str, ...]", tuple(path))
        kind = item.get("kind")
        if kind == "delete":
            if item.keys() != _DELETE_KEYS:
                return None
            changes.append(WireChange(ChangeKind.DELETE, keys))
            continue
        value_kind = _KINDS.get(kind) if type(kind) is str else None
        if value_kind is None or item.keys() != _VALUE_KEYS:
            return None
        value = item["value"]
        if type(value) is dict and _is_missing_json(value):
            return None
        changes.append(WireChange(value_kind, keys, value))
    return tuple(changes)


def decode_plain_request(data: bytes) -> MergeRequest | None:
    """Decode ``data`` if it is a merge request of the common shape, else ``None``.

    The common shape: a whole ``bytes`` message of type merge, step 0 or step 2 with
    an empty chain, canonical varuints, UTF-8 strings, a well-formed state vector (the
    strict rules) and a plain change set (see :func:`_changes`). When this returns a
    request, :func:`~sync.wire.protocol.decode_message` would return an equal one;
    ``None`` promises nothing (the caller runs the general decoder).
    """
    if type(data) is not bytes or len(data) < 6 or data[0] != _MERGE_BYTE:
        return None
    step = data[1]
    if step != _REQUEST and step != _WRITER_REQUEST:
        return None
    request_id, pos = _uint(data, 2)
    if request_id < 0:
        return None
    agent, pos = _string(data, pos)
    if agent is None:
        return None
    size, pos = _uint(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        return None
    base = data[pos:end]
    try:
        VersionVector.from_state(base, strict=True)
    except InvalidUpdate:
        return None
    size, pos = _uint(data, end)
    end = pos + size
    if size < 0 or end > len(data):
        return None
    changes = _changes(data[pos:end])
    if changes is None:
        return None
    if step == _REQUEST:
        if end != len(data):
            return None
        return MergeRequest(request_id, agent, base, changes)
    writer, pos = _string(data, end)
    if writer is None or pos + 1 != len(data) or data[pos] != 0:  # chain: the one byte 00
        return None
    try:  # checks the writer's length
        return MergeRequest(request_id, agent, base, changes, writer, (), ())
    except ProtocolError:
        return None
