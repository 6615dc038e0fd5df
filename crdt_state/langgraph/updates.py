"""Partial updates of a shared channel, as :class:`~crdt_state.Change` lists (pure logic).

A LangGraph node updates a :class:`~crdt_state.langgraph.SharedChannel` by
returning a nested dict. This module turns such an update into the changes a
merge sends, and applies changes to a plain snapshot (for previews):

- a nested ``dict`` descends: ``{"customer": {"tier": "gold"}}`` sets
  ``customer.tier`` and leaves the other keys of ``customer`` alone;
- a ``list`` appends its items: ``{"log": ["triaged"]}`` adds one entry, and
  concurrent appends to one list are all kept;
- ``langgraph.types.Overwrite(value)`` sets the value as a whole (a dict or
  a list replaced, not descended into or appended to);
- :data:`crdt_state.MISSING` deletes the path;
- any other value (a JSON scalar) is set.

An empty dict changes nothing (``Overwrite({})`` sets an empty map).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.types import Overwrite

from ..conflicts import Change
from ..errors import InvalidPath, WrongType
from ..paths import Path, parse_path
from ..values import MISSING

__all__ = ["apply_changes", "update_changes"]


def update_changes(update: object) -> list[Change]:
    """The changes a partial update of a shared channel stands for.

    Raises:
        WrongType: ``update`` is not a dict.
        InvalidPath: a key is empty or not a string.
    """
    if isinstance(update, Overwrite):
        raise WrongType(
            "a shared channel cannot be overwritten as a whole; overwrite its keys",
            details={"value": repr(update.value)[:200]},
        )
    if not isinstance(update, Mapping):
        raise WrongType(
            f"a shared channel takes a dict of partial updates, not {type(update).__name__}",
            details={"value": repr(update)[:200]},
        )
    out: list[Change] = []
    _walk(update, (), out)
    return out


def _walk(update: Mapping[Any, Any], prefix: Path, out: list[Change]) -> None:
    for key, value in update.items():
        if not isinstance(key, str) or not key:
            raise InvalidPath(
                "update keys must be non-empty strings",
                path=prefix or None,
                details={"key": repr(key)},
            )
        path = (*prefix, key)
        if isinstance(value, Overwrite):
            out.append(Change("set", path, value.value))
        elif value is MISSING:
            out.append(Change("delete", path))
        elif isinstance(value, Mapping):
            _walk(value, path, out)
        elif isinstance(value, (list, tuple)):
            if value:
                out.append(Change("append", path, list(value)))
        else:
            out.append(Change("set", path, value))


def apply_changes(snapshot: Mapping[str, Any], changes: Iterable[Change]) -> dict[str, Any]:
    """A copy of ``snapshot`` with ``changes`` applied, the way a merge without conflicts would.

    Used to preview a node's own writes (LangGraph's conditional edges read the
    state "as the node left it"); nothing is validated beyond the tree shape.
    """
    out: dict[str, Any] = copy.deepcopy(dict(snapshot))
    for change in changes:
        path = parse_path(change.path)
        parent = out
        for key in path[:-1]:
            child = parent.get(key)
            if not isinstance(child, dict):
                child = parent[key] = {}
            parent = child
        leaf = path[-1]
        if change.kind == "delete":
            parent.pop(leaf, None)
        elif change.kind == "append":
            current = parent.get(leaf)
            items = copy.deepcopy(list(change.value))
            parent[leaf] = [*current, *items] if isinstance(current, list) else items
        else:
            parent[leaf] = copy.deepcopy(change.value)
    return out
