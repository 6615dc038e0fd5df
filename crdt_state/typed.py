"""Typed states: the schema side of a :class:`~crdt_state.SharedState`.

:class:`TypedMixin` gives ``SharedState`` its typed accessors (``schema``,
``model()``, ``json_schema()``) and the hooks every write goes through:
``_prepare``/``_prepare_items`` validate and normalise values before they
reach a branch or a merge, and ``_check_plan`` refuses a merge plan that
would leave the state invalid. Without a schema values are only normalised
(:func:`crdt_state.values.normalize`) and every plan is accepted. The schema
itself is :class:`crdt_state.schema.StateSchema`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .conflicts import Change
from .paths import Path
from .values import normalize

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .schema import StateSchema

__all__ = ["TypedMixin"]


class TypedMixin:
    """Schema accessors and write hooks (part of :class:`~crdt_state.SharedState`).

    Uses the state's ``_schema`` (``None`` for an untyped state), its mirror
    and ``snapshot`` (declared below for typing).
    """

    _schema: StateSchema | None
    _mirror: dict[str, Any]
    snapshot: Callable[[], dict[str, Any]]

    @property
    def schema(self) -> type[BaseModel] | None:
        """The pydantic model of this state, if it has one."""
        return self._schema.model_type if self._schema is not None else None

    def model(self) -> BaseModel:
        """The state as a validated instance of its schema (``TypeError`` without one)."""
        if self._schema is None:
            raise TypeError("this state has no schema")
        return self._schema.to_model(self.snapshot())

    def to_model(self, data: dict[str, Any]) -> BaseModel:
        """``data`` (a snapshot of this state, or one like it) validated as an instance
        of the schema: ``TypeError`` without one, :class:`~crdt_state.errors.SchemaError`
        for bad data."""
        if self._schema is None:
            raise TypeError("this state has no schema")
        return self._schema.to_model(data)

    def json_schema(self) -> dict[str, Any]:
        """The schema's JSON schema, ready to hand to an LLM as a tool definition."""
        if self._schema is None:
            raise TypeError("this state has no schema")
        return self._schema.json_schema()

    # -- hooks every write goes through ------------------------------------------
    def _prepare(self, path: Path, value: Any) -> Any:
        """Validate and normalise a value about to be written at ``path``."""
        if self._schema is not None:
            return self._schema.prepare(path, value)
        return normalize(value, path)

    def _prepare_items(self, path: Path, items: list[Any]) -> list[Any]:
        """Validate and normalise items about to be appended at ``path``."""
        if self._schema is not None:
            return self._schema.prepare_items(path, items)
        return [normalize(v, path, level=len(path) + 1) for v in items]

    def _check_plan(self, plan: list[Change]) -> None:
        """Refuse a merge plan that would make the state invalid (under the lock)."""
        if self._schema is not None and plan:
            self._schema.check_plan(self._mirror, plan)
