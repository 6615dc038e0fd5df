"""Typed states: a pydantic model as the schema of a :class:`SharedState`.

``SharedState(schema=Model)`` keeps storing plain JSON data in the same Yjs
layout as an untyped state (nested models and ``dict[str, X]`` are
``Y.Map``, lists are ``Y.Array``, scalars are scalars); the schema adds:

- **validated writes**: every ``branch.set``/``append``/``update`` and every
  ``commit`` value is validated against the type of the field at its path
  before the branch changes, then stored in JSON form (datetimes as ISO
  strings, enums as their values, models as maps, sets and tuples as lists);
- **validated merges**: a merge whose result would not validate (a resolver
  returning a bad value, a delete of a required field) is refused before
  anything is applied, and an update from another replica is tried on a twin
  document before it is integrated;
- **typed reads**: ``state.model()`` / ``branch.model()``;
- **per-field merge policies** declared with ``Annotated`` (see
  :mod:`crdt_state._schema_slots`), below explicit ``resolvers=`` rules;
- ``state.json_schema()`` for handing to an LLM as a tool definition.

Every refusal is a :class:`~crdt_state.errors.SchemaError` whose ``errors``
are shaped like pydantic's (``type``, ``loc``, ``msg``, ``input``, sometimes
``ctx``), with ``loc`` starting at the root of the state. Besides pydantic's
own error types, path problems use ``extra_forbidden`` (no such field),
``path_type`` (a path into a scalar, a list or a union) and ``missing``
(a required field deleted).

Keys in the document are field *names* (not aliases). Stored values are
validated in pydantic's JSON mode, so strict models accept the stored form.
What is checked, and when: a write is validated against its field's type and
constraints; validators of the models that contain it run when the branch
merges (a merge re-validates the smallest enclosing value that can be
judged alone: the written value, its enclosing model, or, when the root
model has validators, the whole state). Errors in parts of the state that a
merge did not touch are not held against it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pycrdt import Doc
from pydantic import BaseModel, ValidationError

from . import _document as ydoc
from ._schema_errors import (
    BY_NAME,
    dump,
    pydantic_errors,
    refused_extras,
    schema_error,
    show_type,
    validate_input,
)
from ._schema_slots import Slot, error_entry
from .conflicts import Change
from .errors import INTERRUPTS, InvalidUpdate, SchemaError, UnsupportedValue
from .paths import Path, format_path, is_prefix, parse_path
from .values import MISSING, normalize, patch, tree_get

__all__ = ["StateSchema"]


class StateSchema:
    """The schema of a typed state: validation, defaults, policies and typed reads.

    Built by ``SharedState(schema=Model)``; also usable on its own (a remote
    replica can validate with it). Thread-safe: its caches only grow.
    """

    def __init__(self, model: type[BaseModel]) -> None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"schema must be a pydantic BaseModel subclass, not {model!r}")
        self.model_type: type[BaseModel] = model
        self._root = Slot.root(model)

    def __repr__(self) -> str:
        return f"<StateSchema {self.model_type.__name__}>"

    # -- the model ----------------------------------------------------------------
    def policies(self) -> dict[str, Any]:
        """``{pattern: policy}`` from ``Annotated`` metadata; mapping keys are ``*``."""
        found: dict[Path, Any] = {}
        self._root.walk_policies(found)
        return {".".join(path): policy for path, policy in found.items()}

    def defaults(self) -> dict[str, Any]:
        """The JSON form of every field default, by field name.

        Fields without a default, and defaults that do not validate (such as
        ``x: int = None``), are left out: reading the model fills them in.
        """
        out: dict[str, Any] = {}
        for name, info in self.model_type.model_fields.items():
            if info.is_required():
                continue
            try:
                value = info.get_default(call_default_factory=True, validated_data={})
                out[name] = self.prepare((name,), value)
            except (SchemaError, UnsupportedValue, TypeError):
                continue
        return out

    def json_schema(self) -> dict[str, Any]:
        """The model's JSON schema (validation mode)."""
        return self.model_type.model_json_schema()

    def slot(self, path: Path) -> Slot:
        """The slot of ``path``; :class:`SchemaError` when the path cannot exist."""
        node = self._root
        for i, key in enumerate(path):
            node = node.child(key, path[: i + 1])
        return node

    # -- writes ---------------------------------------------------------------------
    def prepare(self, path: Path, value: Any) -> Any:
        """Validate ``value`` for ``path`` and return its JSON form (a fresh copy).

        Accepts Python values (model instances, datetimes, enum members) and
        their stored JSON form alike. Raises :class:`SchemaError`.
        """
        slot = self.slot(path)
        if slot.kind == "any":
            return normalize(value, path)
        validated = validate_input(slot, value, path)
        extras = refused_extras(slot, value, path)
        if extras:
            raise schema_error(extras, path)
        return dump(slot, validated, path)

    def prepare_items(self, path: Path, items: list[Any]) -> list[Any]:
        """Validate items about to be appended to the list at ``path``, one by one.

        Errors carry ``loc = path + (index in items,)``.
        """
        slot = self.slot(path)
        level = len(path) + 1  # items sit one level below their list
        if slot.kind == "any":
            return [normalize(v, path, level=level) for v in items]
        if slot.kind != "list":
            raise SchemaError(
                f"{format_path(path)}: cannot append to a field of type {show_type(slot.core)}",
                path=path,
                errors=[error_entry("list_type", path, "Input should be a valid list", None)],
            )
        item = slot.item_slot()
        out: list[Any] = []
        errors: list[dict[str, Any]] = []
        for i, value in enumerate(items):
            if item.kind == "any":
                out.append(normalize(value, path, level=level))
                continue
            try:
                validated = validate_input(item, value, path, (i,))
            except SchemaError as exc:
                errors.extend(exc.errors)
                continue
            extras = refused_extras(item, value, (*path, i))
            if extras:
                errors.extend(extras)
            else:
                out.append(dump(item, validated, path, level))
        if errors:
            raise schema_error(errors, path)
        return out

    def partial_items(self, values: BaseModel | Mapping[str, Any]) -> list[tuple[Path, Any]]:
        """``[(path, JSON value)]`` for ``branch.update``, every value validated first.

        A model instance gives the fields explicitly set on it
        (``model_fields_set``); a dict gives its keys, which may be dotted
        paths. All errors are reported at once.
        """
        items: list[tuple[Path, Any]]
        if isinstance(values, BaseModel):
            if not isinstance(values, self.model_type):
                raise TypeError(
                    f"update() takes a {self.model_type.__name__} or a dict, "
                    f"not {type(values).__name__}"
                )
            items = [
                ((name,), getattr(values, name))
                for name in type(values).model_fields
                if name in values.model_fields_set
            ]
        elif isinstance(values, Mapping):
            items = [(parse_path(k), v) for k, v in values.items()]
        else:
            raise TypeError(f"update() takes a model or a dict, not {type(values).__name__}")
        out: list[tuple[Path, Any]] = []
        errors: list[dict[str, Any]] = []
        for path, value in items:
            try:
                out.append((path, self.prepare(path, value)))
            except SchemaError as exc:
                errors.extend(exc.errors)
        if errors:
            raise schema_error(errors, items[0][0] if len(items) == 1 else None)
        return out

    # -- reads ----------------------------------------------------------------------
    def to_model(self, snapshot: Mapping[str, Any]) -> BaseModel:
        """A validated model instance of a plain snapshot (:class:`SchemaError` if invalid)."""
        try:
            return self.model_type.model_validate_json(json.dumps(snapshot), **BY_NAME)
        except ValidationError as exc:
            raise schema_error(
                pydantic_errors(exc, ()), None, "the state does not validate"
            ) from None

    # -- merges and remote updates ----------------------------------------------------
    def check_plan(self, mirror: Mapping[str, Any], plan: Sequence[Change]) -> None:
        """Refuse (``SchemaError``) a merge plan after which the state would be invalid.

        Called under the state lock, before anything is applied. Only the
        smallest values that can be judged alone are validated: the value
        written, or its enclosing model, climbing further only through models
        with validators and constrained containers; a whole-state check only
        when the root model has validators.
        """
        errors: list[dict[str, Any]] = []
        points: set[Path] = set()
        for op in plan:
            try:
                point = self._check_point(op)
            except SchemaError as exc:
                errors.extend(exc.errors)
                continue
            if isinstance(point, dict):
                errors.append(point)
            elif point is not None:
                points.add(point)
        for point in _outermost(points):
            if point == ():
                touched = {op.path[0] for op in plan}
                top = dict(mirror)
                for key in touched:
                    value = _value_after(mirror, plan, (key,))
                    if value is MISSING:
                        top.pop(key, None)
                    else:
                        top[key] = value
                errors.extend(self._whole_errors(top, touched))
            else:
                errors.extend(self._value_errors(point, _value_after(mirror, plan, point)))
        if errors:
            raise schema_error(errors, None, "the merge would make the state invalid")

    def _check_point(self, op: Change) -> Path | dict[str, Any] | None:
        """Where to validate after ``op``: a path, ``None`` (nothing), or a ready error."""
        path = op.path
        slot = self.slot(path)
        parent = self.slot(path[:-1])
        point: Path | None
        if op.kind == "delete":
            if len(path) == 1 and not parent.guarded:
                if slot.required:
                    return error_entry("missing", path, "Field required", None)
                return None
            point = path[:-1] if (parent.kind == "model" or parent.guarded) else None
        else:
            point = path if (op.kind == "set" or not slot.plain_list) else None
            if len(path) > 1 and parent.kind == "model":
                point = path[:-1]
        node = point if point is not None else path
        while node and self.slot(node[:-1]).guarded:
            node = node[:-1]
            point = node
        return point

    def _value_errors(self, path: Path, value: Any) -> list[dict[str, Any]]:
        slot = self.slot(path)
        if value is MISSING:
            return [error_entry("missing", path, "Field required", None)] if slot.required else []
        if slot.kind == "any":
            return []
        try:
            slot.adapter.validate_json(json.dumps(value), **BY_NAME)
        except ValidationError as exc:
            return pydantic_errors(exc, path)
        return []

    def _whole_errors(self, top: Mapping[str, Any], touched: set[str]) -> list[dict[str, Any]]:
        """Errors of the whole state that concern the ``touched`` top-level keys."""
        errors: list[dict[str, Any]] = []
        for key in touched:  # unknown top-level keys
            if key not in top:
                continue
            try:
                self.slot((key,))
            except SchemaError as exc:
                errors.extend(exc.errors)
        try:
            self.model_type.model_validate_json(json.dumps(top), **BY_NAME)
        except ValidationError as exc:
            errors.extend(
                e for e in pydantic_errors(exc, ()) if not e["loc"] or e["loc"][0] in touched
            )
        return errors

    def check_update(self, doc: Doc[Any], data: bytes, *, pending: bytes | None = None) -> None:
        """Refuse a remote Yjs update after which the state would not validate.

        The update is applied to a twin of ``doc`` (a fresh document holding
        its full state, and ``pending``, the structs ``doc`` keeps pending, which
        may land with it); the top-level fields it touches are validated there
        (the whole state when the root model has validators). ``doc`` is not
        modified. Raises :class:`SchemaError`, or :class:`InvalidUpdate` for
        bytes that are not an update. Costs a copy of the document.
        """
        touched: set[str] = set()

        def on_events(events: list[Any]) -> None:
            for event in events:
                where = list(event.path)
                if where:
                    if isinstance(where[0], str):
                        touched.add(where[0])
                else:
                    touched.update(k for k in event.keys if isinstance(k, str))

        try:
            twin = ydoc.observed_copy(doc, [pending, data], on_events)
        except Exception as exc:
            raise InvalidUpdate.from_failure(exc, data) from exc
        except BaseException as exc:  # PanicException from the Rust core
            if isinstance(exc, INTERRUPTS):
                raise
            raise InvalidUpdate.from_failure(exc, data) from exc
        if not touched:
            return
        errors: list[dict[str, Any]] = []
        if self._root.guarded:
            errors = self._whole_errors(ydoc.doc_snapshot(twin), touched)
        else:
            for key in sorted(touched):
                try:
                    self.slot((key,))
                except SchemaError as exc:
                    errors.extend(exc.errors)
                    continue
                errors.extend(self._value_errors((key,), ydoc.doc_read(twin, (key,))))
        if errors:
            raise schema_error(errors, None, "update refused: the state would not validate")


# -- helpers of check_plan --------------------------------------------------------------
def _outermost(points: set[Path]) -> list[Path]:
    ordered = sorted(points, key=len)
    kept: list[Path] = []
    for point in ordered:
        if not any(is_prefix(k, point) for k in kept):
            kept.append(point)
    return kept


def _value_after(mirror: Mapping[str, Any], plan: Sequence[Change], at: Path) -> Any:
    """The value at ``at`` once ``plan`` is applied (copies only along written paths)."""
    root = mirror if isinstance(mirror, dict) else dict(mirror)
    current = tree_get(root, at) if at else root
    for op in plan:
        if not is_prefix(at, op.path):
            continue
        rest = op.path[len(at) :]
        before = tree_get(current, rest) if rest else current
        if op.kind == "set":
            new = op.value
        elif op.kind == "delete":
            new = MISSING
        else:
            new = [*(before if isinstance(before, list) else []), *op.value]
        current = patch(current, rest, new) if rest else new
    return current
