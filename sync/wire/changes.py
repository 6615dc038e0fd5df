"""The JSON payloads of the branch-merge extension: change sets and merge-result bodies.

Both travel as UTF-8 JSON inside varbytes (see ``docs/protocol.md``). JSON is read strictly:
no ``NaN``/``Infinity`` (nor numbers that overflow to them), no duplicate object keys, no
unknown fields, no invalid UTF-8. Every decoding failure is a
:class:`~sync.wire.errors.ProtocolError`; encoders raise it with code ``invalid_value`` for values
JSON cannot carry exactly (non-``str`` dict keys, tuples, sets, non-finite floats, ...), so
``decode(encode(x)) == x`` for everything an encoder accepts.

**The missing sentinel.** Where a value may be absent -- the base, current, incoming and
resolved values of a conflict -- absence is written as the JSON object ``{"$missing": true}``
and read back as :data:`MISSING`. That exact object (one key ``"$missing"`` mapped to
``true``) is therefore reserved at the top level of every value slot, in change sets too: an
encoder refuses to send it as a real value and a decoder refuses it where absence makes no
sense. Nested occurrences (``{"a": {"$missing": true}}``) are ordinary data.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias, cast

from crdt_state.values import MISSING, Missing
from sync.wire._strict_json import JsonValue, check_json, dump, load
from sync.wire.errors import ErrorCode, ProtocolError

__all__ = [
    "MISSING",
    "WireChange",
    "ChangeKind",
    "WireConflict",
    "ErrorRecord",
    "JsonValue",
    "Missing",
    "WirePath",
    "decode_change_set",
    "decode_result_body",
    "encode_applied_body",
    "encode_change_set",
    "encode_result_body",
]

WirePath: TypeAlias = tuple[str, ...]
"""A path from the root map ``state``: one string key per level, never empty."""


# The "no value at this path" marker is the core's own, so values cross the
# boundary between the codec and crdt_state unchanged.
_MISSING_JSON: Final[dict[str, JsonValue]] = {"$missing": True}


class ChangeKind(enum.StrEnum):
    """What one change does at its path."""

    SET = "set"
    DELETE = "delete"
    APPEND = "append"


@dataclass(frozen=True, slots=True)
class WireChange:
    """One write of a branch: ``set``/``append`` carry a value, ``delete`` carries none.

    Construction checks the shape (non-empty path of ``str``; ``value`` is :data:`MISSING`
    exactly for ``delete``) and raises :class:`ProtocolError` otherwise.
    """

    kind: ChangeKind
    path: WirePath
    value: JsonValue | Missing = MISSING

    def __post_init__(self) -> None:
        _check_path(self.path, ErrorCode.INVALID_VALUE)
        if (self.kind is ChangeKind.DELETE) != (self.value is MISSING):
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"{self.kind.value} change at {list(self.path)} "
                + ("must not carry a value" if self.kind is ChangeKind.DELETE else "needs a value"),
            )


@dataclass(frozen=True, slots=True)
class WireConflict:
    """A same-path conflict found by the hub, and how it was resolved.

    ``base`` is the value at the branch's fork base, ``current`` the hub's value before the
    merge, ``incoming`` the branch's value, ``value`` the value after the merge; any of them
    may be :data:`MISSING`. ``resolution`` names the policy outcome (e.g.
    ``"last_writer_wins"``, ``"retry"``); agents may be ``None`` when unknown.
    ``same_value`` is true when both writes gave the path the same value (still a
    conflict: "both decided 1" and "both incremented 0" look alike).
    """

    path: WirePath
    base: JsonValue | Missing
    current: JsonValue | Missing
    incoming: JsonValue | Missing
    current_agent: str | None
    incoming_agent: str | None
    resolution: str
    value: JsonValue | Missing = MISSING
    same_value: bool = False

    def __post_init__(self) -> None:
        _check_path(self.path, ErrorCode.INVALID_VALUE)


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """Why a merge failed: a stable machine-readable ``code`` and a human ``message``."""

    code: str
    message: str


# ---------------------------------------------------------------------------- encoding


def encode_change_set(changes: Sequence[WireChange]) -> bytes:
    """Encode changes as a UTF-8 JSON array (order kept).

    Each element is ``{"kind": k, "path": [..]}`` plus ``"value"`` for ``set``/``append``.
    """
    items: list[JsonValue] = []
    for change in changes:
        item: dict[str, JsonValue] = {
            "kind": change.kind.value,
            "path": list(change.path),
        }
        if change.kind is not ChangeKind.DELETE:
            item["value"] = _present_value(change.value)
        items.append(item)
    return dump(items)


def encode_result_body(
    applied: Sequence[WirePath],
    conflicts: Sequence[WireConflict],
    error: ErrorRecord | None,
) -> bytes:
    """Encode a merge-result body as a UTF-8 JSON object.

    Layout: ``{"applied": [path..], "conflicts": [conflict..], "error": null |
    {"code": str, "message": str}}``; a conflict has the fields of :class:`WireConflict`.
    """
    body: dict[str, JsonValue] = {
        "applied": [list(path) for path in applied],
        "conflicts": [
            {
                "path": list(c.path),
                "base": _slot_value(c.base),
                "current": _slot_value(c.current),
                "incoming": _slot_value(c.incoming),
                "current_agent": c.current_agent,
                "incoming_agent": c.incoming_agent,
                "resolution": c.resolution,
                "value": _slot_value(c.value),
                "same_value": c.same_value,
            }
            for c in conflicts
        ],
        "error": None if error is None else {"code": error.code, "message": error.message},
    }
    return dump(body)


def encode_applied_body(applied: Sequence[WirePath]) -> bytes:
    """``encode_result_body(applied, (), None)``, byte for byte (an ok result's body)."""
    paths: list[JsonValue] = [list(path) for path in applied]
    return b'{"applied":' + dump(paths) + b',"conflicts":[],"error":null}'


def _slot_value(value: JsonValue | Missing) -> JsonValue:
    return dict(_MISSING_JSON) if value is MISSING else _present_value(value)


def _present_value(value: JsonValue | Missing) -> JsonValue:
    if value is MISSING or _is_missing_json(value):
        raise ProtocolError(
            ErrorCode.INVALID_VALUE,
            'a value may not be MISSING or {"$missing": true} here',
        )
    check_json(value)
    return cast("JsonValue", value)


# ---------------------------------------------------------------------------- decoding


def decode_change_set(data: bytes) -> tuple[WireChange, ...]:
    """Decode :func:`encode_change_set` output; raise :class:`ProtocolError` on anything else.

    Codes: ``invalid_utf8``, ``invalid_json``, ``invalid_change_set`` (wrong shape),
    ``unknown_change_kind`` (a kind this version does not know: close code 1003).
    The field ``combine`` of earlier versions (``true`` or ``false``) is accepted
    and ignored.
    """
    items = load(data)
    bad = ErrorCode.INVALID_CHANGE_SET
    if not isinstance(items, list):
        raise ProtocolError(bad, "change set must be a JSON array")
    changes: list[WireChange] = []
    for index, item in enumerate(items):
        where = f"change {index}"
        obj = _object(item, bad, where, required={"kind", "path"}, optional={"value", "combine"})
        if not isinstance(obj.get("combine", False), bool):
            raise ProtocolError(bad, f"{where}: combine must be true or false")
        kind_name = obj["kind"]
        if not isinstance(kind_name, str):
            raise ProtocolError(bad, f"{where}: kind must be a string")
        try:
            kind = ChangeKind(kind_name)
        except ValueError:
            raise ProtocolError(
                ErrorCode.UNKNOWN_CHANGE_KIND, f"{where}: unknown kind {kind_name!r}"
            ) from None
        path = _path(obj["path"], bad, where)
        if kind is ChangeKind.DELETE:
            if "value" in obj:
                raise ProtocolError(bad, f"{where}: delete carries no value")
            changes.append(WireChange(kind, path))
            continue
        if "value" not in obj:
            raise ProtocolError(bad, f"{where}: {kind.value} needs a value")
        value = obj["value"]
        if _is_missing_json(value):
            raise ProtocolError(bad, f"{where}: {kind.value} of the missing sentinel")
        changes.append(WireChange(kind, path, value))
    return tuple(changes)


def decode_result_body(
    data: bytes,
) -> tuple[tuple[WirePath, ...], tuple[WireConflict, ...], ErrorRecord | None]:
    """Decode :func:`encode_result_body` output into ``(applied, conflicts, error)``.

    Codes: ``invalid_utf8``, ``invalid_json``, ``invalid_result_body`` (wrong shape).
    """
    bad = ErrorCode.INVALID_RESULT_BODY
    body = _object(load(data), bad, "body", required={"applied", "conflicts", "error"})
    raw_applied = body["applied"]
    if not isinstance(raw_applied, list):
        raise ProtocolError(bad, "applied must be an array")
    applied = tuple(_path(p, bad, f"applied[{i}]") for i, p in enumerate(raw_applied))
    raw_conflicts = body["conflicts"]
    if not isinstance(raw_conflicts, list):
        raise ProtocolError(bad, "conflicts must be an array")
    conflicts = tuple(_conflict(c, f"conflicts[{i}]") for i, c in enumerate(raw_conflicts))
    raw_error = body["error"]
    error: ErrorRecord | None = None
    if raw_error is not None:
        obj = _object(raw_error, bad, "error", required={"code", "message"})
        code, message = obj["code"], obj["message"]
        if not isinstance(code, str) or not isinstance(message, str):
            raise ProtocolError(bad, "error code and message must be strings")
        error = ErrorRecord(code, message)
    return applied, conflicts, error


def _conflict(raw: JsonValue, where: str) -> WireConflict:
    bad = ErrorCode.INVALID_RESULT_BODY
    fields = {"path", "base", "current", "incoming", "current_agent", "incoming_agent"}
    # same_value is optional: hubs before it existed do not send it
    obj = _object(
        raw, bad, where, required=fields | {"resolution", "value"}, optional={"same_value"}
    )
    same_value = obj.get("same_value", False)
    if not isinstance(same_value, bool):
        raise ProtocolError(bad, f"{where}: same_value must be true or false")
    agents = (obj["current_agent"], obj["incoming_agent"])
    current_agent, incoming_agent = agents
    if not all(a is None or isinstance(a, str) for a in agents):
        raise ProtocolError(bad, f"{where}: agents must be strings or null")
    resolution = obj["resolution"]
    if not isinstance(resolution, str):
        raise ProtocolError(bad, f"{where}: resolution must be a string")
    return WireConflict(
        path=_path(obj["path"], bad, where),
        base=_from_slot(obj["base"]),
        current=_from_slot(obj["current"]),
        incoming=_from_slot(obj["incoming"]),
        current_agent=current_agent if isinstance(current_agent, str) else None,
        incoming_agent=incoming_agent if isinstance(incoming_agent, str) else None,
        resolution=resolution,
        value=_from_slot(obj["value"]),
        same_value=same_value,
    )


def _from_slot(value: JsonValue) -> JsonValue | Missing:
    return MISSING if _is_missing_json(value) else value


def _is_missing_json(value: object) -> bool:
    return type(value) is dict and value == _MISSING_JSON and value["$missing"] is True


def _object(
    raw: JsonValue,
    code: ErrorCode,
    where: str,
    *,
    required: set[str],
    optional: frozenset[str] | set[str] = frozenset(),
) -> dict[str, JsonValue]:
    if not isinstance(raw, dict):
        raise ProtocolError(code, f"{where}: expected a JSON object")
    keys = raw.keys()
    if missing := required - keys:
        raise ProtocolError(code, f"{where}: missing field(s) {sorted(missing)}")
    if extra := keys - required - optional:
        raise ProtocolError(code, f"{where}: unknown field(s) {sorted(extra)}")
    return raw


def _path(raw: JsonValue, code: ErrorCode, where: str) -> WirePath:
    if not isinstance(raw, list):
        raise ProtocolError(code, f"{where}: path must be an array of strings")
    path = tuple(key for key in raw if isinstance(key, str))
    if len(path) != len(raw):
        raise ProtocolError(code, f"{where}: path must be an array of strings")
    _check_path(path, code)
    return path


def _check_path(path: object, code: ErrorCode) -> None:
    if type(path) is not tuple or not path or not all(isinstance(key, str) for key in path):
        raise ProtocolError(code, f"path must be a non-empty tuple of str, got {path!r}")
