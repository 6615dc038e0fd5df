"""The MCP tools' answers as JSON data: tokens in, results, conflicts and history out (pure)."""

from __future__ import annotations

from typing import Any

from crdt_state import (
    MISSING,
    UNRESOLVED,
    BlameEntry,
    ConflictRecord,
    CrdtStateError,
    HistoryEntry,
    InvalidUpdate,
    VersionVector,
    format_path,
)

__all__ = ["blame_json", "conflict_json", "history_json", "parse_token", "record_json"]


def parse_token(text: str) -> VersionVector:
    """The token ``text`` stands for; :class:`InvalidUpdate` unless it is a canonical token."""
    try:
        token = VersionVector.from_text(text)
    except (CrdtStateError, ValueError) as exc:
        raise InvalidUpdate(
            "not a token: pass the 'token' of a read_state or commit_changes result",
            details={"base": text[:100]},
        ) from exc
    if token.to_text() != text:
        raise InvalidUpdate(
            "not a token: pass the 'token' of a read_state or commit_changes result",
            details={"base": text[:100]},
        )
    return token


def _jsonable(value: Any) -> Any:
    return {"$missing": True} if value is MISSING else value


def conflict_json(c: Any) -> dict[str, Any]:
    """A :class:`Conflict` or :class:`ConflictRecord` as JSON data."""
    resolution = c.resolution
    settled = resolution is not UNRESOLVED
    return {
        "path": format_path(c.path),
        "base": _jsonable(c.base),
        "current": _jsonable(c.current),
        "incoming": _jsonable(c.incoming),
        "current_agent": c.current_agent,
        "incoming_agent": c.incoming_agent,
        "resolution": _jsonable(resolution) if settled else None,
        "resolved": settled,
        "policy": c.policy,
    }


def history_json(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "token": entry.token.to_text(),
        "agent": entry.agent,
        "paths": [format_path(p) for p in entry.paths],
        "time": entry.time,
        "origin": entry.origin,
    }


def blame_json(entry: BlameEntry) -> dict[str, Any]:
    return {
        "path": format_path(entry.path),
        "agent": entry.agent,
        "time": entry.time,
        "token": entry.token.to_text(),
        "seq": entry.seq,
    }


def record_json(record: ConflictRecord) -> dict[str, Any]:
    out = conflict_json(record)
    out.update(applied=record.applied, token=record.token.to_text(), time=record.time)
    return out
