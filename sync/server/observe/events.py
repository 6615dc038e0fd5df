"""The JSON events of the inspector feed, built from the library's records (pure logic).

Each function turns one record (a change the room integrated, a conflict, a history
entry, a blame entry, an awareness update, a merge result frame) into a plain
JSON-ready dict; the shapes are written down in ``docs/protocol.md`` (*Inspector feed*).
Values that JSON cannot carry are tagged: an absent value is ``{"$missing": true}``,
a conflict no policy settled has ``"resolution": {"$unresolved": true}``, bytes are
``{"$bytes": "<base64>"}``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from crdt_state import (
    MAX_DEPTH,
    MISSING,
    UNRESOLVED,
    BlameEntry,
    Conflict,
    ConflictRecord,
    HistoryEntry,
    StateUpdate,
)
from crdt_state.values import nesting
from sync.wire import protocol as p
from sync.wire.awareness import decode_entries, decoded_state
from sync.wire.changes import WireConflict
from sync.wire.convert import UNRESOLVED_NAME
from sync.wire.errors import ProtocolError

__all__ = [
    "awareness_states",
    "state_value",
    "blame_event",
    "change_event",
    "conflict_event",
    "history_event",
    "jsonable",
    "merge_event",
]


def jsonable(value: Any) -> Any:
    """``value`` as JSON-ready data (tags for MISSING, UNRESOLVED and bytes; else ``repr``)."""
    if value is MISSING:
        return {"$missing": True}
    if value is UNRESOLVED:
        return {"$unresolved": True}
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return repr(value)


def _path(path: Any) -> list[Any]:
    return [jsonable(k) for k in path]


def conflict_event(conflict: Conflict | ConflictRecord | WireConflict) -> dict[str, Any]:
    """Describe one conflict as a JSON event.

    Returns:
        ``path``, ``base``/``current``/``incoming``, both agents, the policy and the
        resolution (the value it settled on, or ``{"$unresolved": true}``).
    """
    if isinstance(conflict, WireConflict):
        settled = conflict.resolution != UNRESOLVED_NAME
        policy: str | None = conflict.resolution if settled else None
        resolution: Any = conflict.value if settled else UNRESOLVED
        applied = True
    else:
        policy, resolution = conflict.policy, conflict.resolution
        applied = getattr(conflict, "applied", True)
    return {
        "path": _path(conflict.path),
        "base": jsonable(conflict.base),
        "current": jsonable(conflict.current),
        "incoming": jsonable(conflict.incoming),
        "current_agent": conflict.current_agent,
        "incoming_agent": conflict.incoming_agent,
        "policy": policy,
        "resolution": jsonable(resolution),
        "applied": applied,
        "time": getattr(conflict, "time", None),
    }


def change_event(update: StateUpdate) -> dict[str, Any]:
    """A change the room integrated (a merge, or a Yjs update from any client)."""
    return {
        "type": "change",
        "seq": update.seq,
        "token": update.token.to_text(),
        "agent": update.agent,
        "paths": [_path(path) for path in update.paths],
        "origin": update.origin,
        "time": update.time,
        "conflicts": [dict(conflict_event(c), time=update.time) for c in update.conflicts],
    }


def history_event(entry: HistoryEntry) -> dict[str, Any]:
    """One entry of ``history()``."""
    return {
        "seq": entry.seq,
        "token": entry.token.to_text(),
        "agent": entry.agent,
        "paths": [_path(path) for path in entry.paths],
        "time": entry.time,
        "origin": entry.origin,
    }


def blame_event(entry: BlameEntry | None) -> dict[str, Any] | None:
    """The answer of ``blame(path)`` (``None``: nobody wrote it)."""
    if entry is None:
        return None
    return {
        "path": _path(entry.path),
        "agent": entry.agent,
        "time": entry.time,
        "seq": entry.seq,
        "token": entry.token.to_text(),
    }


def merge_event(frame: bytes, agent: str | None) -> dict[str, Any] | None:
    """The merge result frame the hub answered (``None`` if ``frame`` is not one)."""
    try:
        message = p.decode_message(frame)
    except ProtocolError:
        return None
    if not isinstance(message, p.MergeReply):
        return None
    return {
        "type": "merge",
        "status": message.status.name.lower(),
        "agent": agent,
        "applied": [_path(path) for path in message.applied],
        "conflicts": [conflict_event(c) for c in message.conflicts],
        "error": None
        if message.error is None
        else {"code": message.error.code, "message": message.error.message},
    }


def awareness_states(payload: bytes) -> dict[int, Any]:
    """Decode the client states an awareness update carries.

    Returns:
        ``{client_id: state}`` (``None`` for a retired client; each state as
        :func:`state_value` reads it); ``{}`` when the payload does not parse.
    """
    try:
        entries = decode_entries(payload)
    except ProtocolError:
        return {}
    return {entry.client: state_value(entry.state) for entry in entries}


def state_value(text: str) -> Any:
    """An awareness state for a feed: its JSON value, else its text.

    The text when it is not JSON or is nested deeper than :data:`~crdt_state.MAX_DEPTH`
    (which would break the feed's encoding).
    """
    state = decoded_state(text)
    if nesting(state, budget=10_000) > MAX_DEPTH:
        return text
    return state
