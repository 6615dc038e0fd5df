"""Per-merge limits: no single merge request may hold the hub's event loop for long.

Judging a merge costs time in proportion to its changes and to the values they write,
and the hub judges merges on its event loop (every room waits meanwhile). A request
with more changes, more JSON values or deeper nesting than the hub's :class:`Limits`
allow is refused before it is judged, with an error result whose code says which
limit (nothing is written; the connection stays open). Pure logic; the walk stops as
soon as a limit is passed, so checking costs at most about ``max_merge_items`` steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from crdt_state import SharedState
from sync.server.limits import Limits
from sync.wire import protocol as p
from sync.wire.changes import ErrorRecord, WireChange
from sync.wire.errors import ProtocolError
from sync.wire.lib0 import Reader
from sync.wire.messages import MergeStep, MessageType

__all__ = [
    "MERGE_TOO_DEEP",
    "MERGE_TOO_LARGE",
    "MERGE_TOO_MANY_CHANGES",
    "MERGE_TOO_MANY_ITEMS",
    "limits_refusal",
    "merge_refusal",
    "merge_request_id",
    "too_large_reply",
]

MERGE_TOO_LARGE: Final = "merge_too_large"
_REQUEST_STEPS: Final = (MergeStep.REQUEST, MergeStep.WRITER_REQUEST, MergeStep.POLICY_REQUEST)

MERGE_TOO_MANY_CHANGES: Final = "merge_too_many_changes"
MERGE_TOO_MANY_ITEMS: Final = "merge_too_many_items"
MERGE_TOO_DEEP: Final = "merge_too_deep"


def merge_refusal(
    changes: Sequence[WireChange], *, max_changes: int, max_items: int, max_depth: int
) -> tuple[str, str] | None:
    """Why a merge of ``changes`` is over the limits, or ``None`` when it is within them.

    Args:
        changes: the request's changes.
        max_changes: most changes one merge may carry.
        max_items: most JSON values (scalars, lists and objects, each counted once, keys
            not counted) the changes' values may hold together.
        max_depth: deepest nesting of lists and objects in one value (a scalar is 0).

    Returns:
        ``(code, message)``: the code is ``merge_too_many_changes``,
        ``merge_too_many_items`` or ``merge_too_deep``; the message names the limit.
    """
    if len(changes) > max_changes:
        return (
            MERGE_TOO_MANY_CHANGES,
            f"merge has {len(changes)} changes, more than the hub's limit of {max_changes}",
        )
    items = 0
    for index, change in enumerate(changes):
        stack: list[tuple[object, int]] = [(change.value, 0)]
        while stack:
            value, depth = stack.pop()
            items += 1
            if items > max_items:
                return (
                    MERGE_TOO_MANY_ITEMS,
                    f"merge values hold more than the hub's limit of {max_items} items",
                )
            if isinstance(value, dict):
                children: Sequence[object] | None = list(value.values())
            elif isinstance(value, list):
                children = value
            else:
                children = None
            if children is None:
                continue
            if items + len(children) > max_items:  # before walking them: bounded cost
                return (
                    MERGE_TOO_MANY_ITEMS,
                    f"merge values hold more than the hub's limit of {max_items} items",
                )
            if depth + 1 > max_depth:
                path = "/".join(change.path)
                return (
                    MERGE_TOO_DEEP,
                    f"the value of change {index} ({path}) is nested deeper than the "
                    f"hub's limit of {max_depth}",
                )
            stack.extend((child, depth + 1) for child in children)
    return None


def merge_request_id(data: bytes) -> int | None:
    """Read the request id of a merge request from its first bytes only.

    The changes are not decoded. Returns ``None`` for any other or malformed message.

    So a request over ``Limits.max_merge_bytes`` is answered (``merge_too_large``)
    without the cost of decoding it.
    """
    try:
        reader = Reader(data)
        if reader.read_var_uint() != MessageType.MERGE:
            return None
        if reader.read_var_uint() not in _REQUEST_STEPS:
            return None
        return reader.read_var_uint()
    except ProtocolError:
        return None


def limits_refusal(request: p.MergeRequest, limits: Limits) -> tuple[str, str] | None:
    """:func:`merge_refusal` of ``request`` with the hub's ``limits``."""
    return merge_refusal(
        request.changes,
        max_changes=limits.max_merge_changes,
        max_items=limits.max_merge_items,
        max_depth=limits.max_merge_depth,
    )


def too_large_reply(data: bytes | str, state: SharedState, max_bytes: int) -> bytes | None:
    """Answer a merge request over ``max_bytes`` bytes without decoding it.

    Only the first bytes of ``data`` are read (see :func:`merge_request_id`).

    Returns:
        The error result frame (code ``merge_too_large``) when ``data`` is a merge
        request over ``max_bytes``; ``None`` otherwise (then the message is decoded
        as usual).
    """
    if len(data) <= max_bytes or not isinstance(data, bytes):
        return None
    request_id = merge_request_id(data)
    if request_id is None:
        return None
    reason = f"merge request over the hub's limit of {max_bytes} bytes"
    error = ErrorRecord(MERGE_TOO_LARGE, reason)
    return p.encode_merge_result(
        request_id, p.MergeStatus.ERROR, state.token.to_state(), error=error
    )
