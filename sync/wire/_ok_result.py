"""The hub's answer to a merge that met no conflict, encoded without the general path.

:func:`encode_ok_result` gives the bytes ``encode_merge_result(request_id, MergeStatus.OK,
token, applied)`` gives, byte for byte (a property test holds them equal), without
building a :class:`~sync.wire.messages.MergeReply` and with the applied paths' field
remembered: it is the most frequent message a hub sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sync.wire.changes import WirePath, encode_applied_body
from sync.wire.lib0 import encode_var_bytes, encode_var_uint
from sync.wire.messages import MergeStatus, MergeStep, MessageType
from sync.wire.state_vector import validate_state_vector

__all__ = ["encode_ok_result"]

_RESULT_HEAD: Final = encode_var_uint(MessageType.MERGE) + encode_var_uint(MergeStep.RESULT)
_OK: Final = encode_var_uint(MergeStatus.OK)


def encode_ok_result(request_id: int, token: bytes, applied: Sequence[WirePath]) -> bytes:
    """``encode_merge_result(request_id, MergeStatus.OK, token, applied)``, byte for byte.

    The hub's answer to a merge that met no conflict, without building the
    :class:`MergeReply` (whose status rules an ok result with no conflicts and no
    error always meets); raises what that call raises for a bad ``token`` or
    ``request_id``.
    """
    validate_state_vector(token)
    return b"".join(
        (
            _RESULT_HEAD,
            encode_var_uint(request_id),
            _OK,
            encode_var_bytes(token),
            _applied_field(applied),
        )
    )


_APPLIED_FIELDS: dict[tuple[tuple[str, ...], ...], bytes] = {}
_APPLIED_FIELDS_SIZE: Final = 1024
# The body of an ok result depends on its applied paths only, and a hub's merges write the
# same few paths again and again (an agent its own keys): the encoded field is kept by its
# paths when they are a tuple of tuples of ``str`` (equal keys, equal JSON); the whole
# table is dropped when full. Saves ~1.6 us of the ~3.3 an ok result takes.


def _applied_field(applied: Sequence[WirePath]) -> bytes:
    """``encode_var_bytes(encode_applied_body(applied))``, remembered for string paths."""
    key = applied if type(applied) is tuple and _string_paths(applied) else None
    if key is not None:
        known = _APPLIED_FIELDS.get(key)
        if known is not None:
            return known
    field = encode_var_bytes(encode_applied_body(applied))
    if key is not None:
        if len(_APPLIED_FIELDS) >= _APPLIED_FIELDS_SIZE:
            _APPLIED_FIELDS.clear()
        _APPLIED_FIELDS[key] = field
    return field


def _string_paths(applied: tuple[WirePath, ...]) -> bool:
    for path in applied:
        if type(path) is not tuple:
            return False
        for key in path:
            if type(key) is not str:
                return False
    return True
