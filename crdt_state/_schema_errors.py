"""Validating one value of a typed state with pydantic, and the errors it gives.

:class:`~crdt_state.schema.StateSchema` walks the model (:mod:`crdt_state._schema_slots`
finds the slot of a path); the functions here validate a value against a slot and turn
pydantic's ``ValidationError`` into a :class:`~crdt_state.errors.SchemaError` whose
``errors`` are shaped like pydantic's, with ``loc`` starting at the root of the state.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from ._schema_slots import Slot, error_entry
from .errors import SchemaError
from .paths import Path
from .values import normalize

__all__ = [
    "BY_NAME",
    "dump",
    "pydantic_errors",
    "refused_extras",
    "schema_error",
    "show_type",
    "validate_input",
]

BY_NAME: dict[str, Any] = (
    {"by_name": True}
    if "by_name" in inspect.signature(TypeAdapter.validate_python).parameters
    else {}
)
"""Validation keywords: keys are field names, not aliases (when pydantic lets us say so)."""


def show_type(tp: Any) -> str:
    """A short name of the type ``tp`` for messages (``int``, ``list[str]``)."""
    return tp.__name__ if isinstance(tp, type) else repr(tp).replace("typing.", "")


def validate_input(slot: Slot, value: Any, path: Path, loc: tuple[Any, ...] = ()) -> Any:
    """Python-mode validation, falling back to JSON mode for stored forms (strict models).

    Errors are located at ``path + loc``.
    """
    try:
        return slot.adapter.validate_python(value, **BY_NAME)
    except ValidationError as exc:
        first = exc
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = None
    if text is not None:
        try:
            return slot.adapter.validate_json(text, **BY_NAME)
        except ValidationError:
            pass
    raise schema_error(pydantic_errors(first, (*path, *loc)), path) from None


def dump(slot: Slot, validated: Any, path: Path, level: int | None = None) -> Any:
    """The stored (JSON) form of ``validated``, normalised like any value at ``path``."""
    data = slot.adapter.dump_python(validated, mode="json", by_alias=False, warnings=False)
    return normalize(data, path, level=level)


def pydantic_errors(exc: ValidationError, prefix: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Pydantic's error details, JSON-safe, with ``loc`` prefixed by the state path."""
    out: list[dict[str, Any]] = []
    for item in json.loads(exc.json(include_url=False)):
        entry = error_entry(item["type"], (*prefix, *item["loc"]), item["msg"], item.get("input"))
        if "ctx" in item:
            entry["ctx"] = item["ctx"]
        out.append(entry)
    return out


def schema_error(
    errors: list[dict[str, Any]], path: Path | None, headline: str | None = None
) -> SchemaError:
    """One :class:`SchemaError` carrying ``errors``, with a message that lists them.

    Args:
        errors: entries shaped like pydantic's (``type``, ``loc``, ``msg``, ``input``).
        path: the error's path; ``None``: the string keys that start the first ``loc``.
        headline: what was refused, put before the count of errors.

    Returns:
        The error, to be raised by the caller.
    """
    lines = [f"{_show_loc(e['loc'])}: {e['msg']} (input: {_short(e['input'])})" for e in errors]
    count = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}"
    message = f"{headline + ': ' if headline else ''}{count}: " + "; ".join(lines)
    if path is None and errors:
        loc = errors[0]["loc"]
        keys = []
        for key in loc:
            if not isinstance(key, str):
                break
            keys.append(key)
        path = tuple(keys) or None
    return SchemaError(message, errors=errors, path=path)


def _show_loc(loc: Sequence[Any]) -> str:
    """``loc`` as a path for messages: ``a.b[2]``, or ``(state)`` for the root."""
    if not loc:
        return "(state)"
    text = ""
    for key in loc:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text


def _short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def refused_extras(slot: Slot, value: Any, path: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Keys of ``value`` that no field of a model below ``slot`` takes (error entries).

    Pydantic drops such keys silently for a model that does not set ``extra`` (its
    default, ``"ignore"``): an agent's data would vanish without a word, while a write
    to the same key by path is refused. So a model that leaves ``extra`` unset refuses
    them here as ``extra_forbidden`` (a model that sets ``extra="ignore"`` or ``"allow"``
    gets what it asked for). Model instances are not walked (they hold no extra keys).
    """
    out: list[dict[str, Any]] = []
    _walk_extras(slot, value, path, out)
    return out


def _walk_extras(slot: Slot, value: Any, at: tuple[Any, ...], out: list[dict[str, Any]]) -> None:
    if isinstance(value, BaseModel) or slot.kind in ("any", "union", "leaf"):
        return
    if slot.kind == "list":
        if isinstance(value, (list, tuple)):
            item = slot.item_slot()
            for i, entry in enumerate(value):
                _walk_extras(item, entry, (*at, i), out)
        return
    if not isinstance(value, dict):
        return
    if slot.kind == "mapping":
        inner = slot.value_slot()
        for key, entry in value.items():
            _walk_extras(inner, entry, (*at, key), out)
        return
    model = slot.model
    fields = model.model_fields
    strict = model.model_config.get("extra") is None
    for key, entry in value.items():
        name = key if key in fields else _field_of_alias(fields, key)
        if name is not None:
            _walk_extras(slot.child(name, (*at, name)), entry, (*at, key), out)
        elif strict:
            out.append(
                error_entry("extra_forbidden", (*at, key), "Extra inputs are not permitted", entry)
            )


def _field_of_alias(fields: dict[str, Any], key: object) -> str | None:
    for name, info in fields.items():
        if key in (info.alias, info.validation_alias):
            return name
    return None
