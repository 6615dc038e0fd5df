"""The type variables of a state's schema, for type checkers (no run-time effect).

``SharedState(schema=Triage)`` is a ``SharedState[Triage]``: its ``model()``, and its
branches' (``Branch[Triage]``), are typed ``Triage``. A state without a schema is a
``SharedState[BaseModel]`` (the variable's default), whose ``model()`` raises
``TypeError`` at run time. Covariant: the variable only types what the state returns,
so a ``SharedState[Triage]`` goes wherever a ``SharedState`` is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing_extensions import TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["ModelT", "SchemaT"]

ModelT = TypeVar("ModelT", bound="BaseModel", default="BaseModel", covariant=True)
"""A state's schema (a pydantic model class's instances); ``BaseModel`` when not given."""

SchemaT = TypeVar("SchemaT", bound="BaseModel", default="BaseModel")
"""The same, for functions that make a typed state (``connect(..., schema=Triage)``)."""
