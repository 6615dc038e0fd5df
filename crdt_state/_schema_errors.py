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
from pydantic_core import PydanticSerializationError

from ._schema_slots import Slot, error_entry
from .errors import SchemaError, UnsupportedValue
from .paths import Path
from .values import normalize

__all__ = [
    "BY_NAME",
    "dump",
    "first_difference",
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
    """The stored (JSON) form of ``validated``, normalised like any value at ``path``.

    The stored form must read back as what was written: a value that JSON would turn into
    something else (a ``datetime`` or a ``set`` inside a ``dict[str, Any]`` field comes
    back as a ``str`` or a ``list``; a type whose serializer loses information) is refused
    with :class:`~crdt_state.errors.UnsupportedValue` naming where, as a plain ``Any`` field
    refuses it. Lists for tuples, ints for whole floats and an enum's value for the member
    read back as written (they compare equal).
    """
    try:
        data = slot.adapter.dump_python(validated, mode="json", by_alias=False, warnings=False)
    except (PydanticSerializationError, UnicodeError, ValueError, TypeError) as exc:
        raise UnsupportedValue(
            f"cannot be stored as JSON data: {_first_line(exc)}",
            path=path or None,
            details={"type": type(validated).__name__},
        ) from None
    stored = normalize(data, path, level=level)
    if slot.untyped_inside:  # elsewhere the type reads the stored form back as written
        _check_reads_back(slot, validated, stored, path)
    return stored


def _check_reads_back(slot: Slot, validated: Any, stored: Any, path: Path) -> None:
    """Raise :class:`UnsupportedValue` unless ``stored`` validates back to ``validated``."""
    try:
        back = validate_input(slot, stored, path)
    except SchemaError as exc:
        raise UnsupportedValue(
            "its stored JSON form does not read back as its type",
            path=path or None,
            details={"errors": exc.errors},
        ) from None
    wrote = slot.adapter.dump_python(validated, by_alias=False, warnings=False)
    read = slot.adapter.dump_python(back, by_alias=False, warnings=False)
    found = first_difference(wrote, read)
    if found is None:
        return
    loc, was, now = found
    where = f"at {_show_loc((*path, *loc))} " if loc else ""
    raise UnsupportedValue(
        f"the {type(was).__name__} {where}would be stored as JSON and read back as a "
        f"{type(now).__name__} ({_short(now)}); give the field a type that says what it "
        "holds (e.g. dict[str, datetime]) or store JSON data",
        path=path or None,
        details={"at": list(loc), "type": type(was).__name__, "reads_back_as": type(now).__name__},
    )


def first_difference(
    a: Any, b: Any, loc: tuple[Any, ...] = ()
) -> tuple[tuple[Any, ...], Any, Any] | None:
    """Where plain Python data ``a`` and ``b`` first differ: ``(loc, a's, b's)``; ``None``.

    Equal: mappings with the same keys and equal values, lists and tuples with equal items
    (a tuple reads back as a list), numbers of equal value (an int for a whole float),
    strings of equal text (an enum member of ``str`` for its value), bools and ``None``
    only as themselves; anything else when of one type and ``==``.
    """
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        same = type(a) is type(b) and a == b
    elif isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            key = next(iter(a.keys() ^ b.keys()))
            return (*loc, key), a.get(key), b.get(key)
        for key, item in a.items():
            found = first_difference(item, b[key], (*loc, key))
            if found is not None:
                return found
        return None
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return loc, a, b
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, (*loc, i))
            if found is not None:
                return found
        return None
    elif _both(a, b, (int, float)) or _both(a, b, str):
        same = a == b
    else:
        same = type(a) is type(b) and bool(a == b)
    return None if same else (loc, a, b)


def _both(a: Any, b: Any, kind: type | tuple[type, ...]) -> bool:
    return isinstance(a, kind) and isinstance(b, kind)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


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
