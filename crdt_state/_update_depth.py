"""Depth of the values a peer's update would store, checked before it is applied.

An update that would store a value deeper than :data:`~crdt_state.values.MAX_DEPTH` is
refused (:class:`UnsupportedValue`) before it is applied, in three steps from cheap to
exact: an update of ``n`` bytes nests at most ``n / 2`` levels, so a small one under a
shallow state is accepted at once; otherwise :func:`crdt_state._update_scan.depth_bound`
reads a bound from its bytes (items hanging from the existing document count at the
state's depth mark, an upper bound of the depth of its values); only when that bound is
too high is the update tried on a copy of the document and the values it writes measured
(:func:`update_depth`). Structs Yjs keeps pending (their dependencies have not arrived)
are kept aside and scanned again with every later update, since they land when it brings
their dependencies.
"""

from __future__ import annotations

from typing import Any

from pycrdt import Array, Doc, Map

from . import _document as ydoc
from ._core import StateCore
from ._update_scan import depth_bound
from .errors import InvalidUpdate, UnsupportedValue, translate_failures
from .values import MAX_DEPTH, MISSING

__all__ = ["check_update_depth", "update_depth"]


def check_update_depth(core: StateCore, data: bytes, joined: bytes | None) -> None:
    """Refuse (:class:`UnsupportedValue`) an update storing values deeper than the limit.

    Cheap first (the size of the update, then a scan of its bytes with the structs
    held pending, ``joined``; None when pycrdt could not merge them), exact on a copy
    of the document only when those cannot rule it out. Called under the lock, before
    the update is applied.
    """
    if core.held is None and max(core.depth_mark, 1) + len(data) // 2 <= MAX_DEPTH:
        # an item sits at most at the mark (level 1 under the root), and every level
        # of nesting below it takes at least two bytes: a nested type's child names its
        # parent, a plain list or map has a tag and a length, JSON text two brackets
        return
    try:
        if joined is None:
            raise ValueError("the structs held pending and the update do not merge")
        bound = depth_bound(joined, root=ydoc.ROOT, unknown=core.depth_mark, limit=MAX_DEPTH)
    except (ValueError, IndexError):
        bound = MAX_DEPTH + 1  # unreadable here: let the exact check decide
    if bound <= MAX_DEPTH:
        return
    depth = update_depth(core.doc, data, pending=core.held)
    if depth > MAX_DEPTH:
        raise UnsupportedValue(
            f"update refused: it would store a value {depth} levels deep; "
            f"at most {MAX_DEPTH} are allowed",
            details={"depth": depth, "limit": MAX_DEPTH, "size": len(data)},
        )


def update_depth(doc: Doc[Any], data: bytes, *, pending: bytes | None = None) -> int:
    """How deep the values ``data`` writes into ``doc``'s state are, measured on a copy.

    ``doc`` is not modified. ``pending`` are the structs ``doc`` keeps pending
    (``doc.get_update()`` leaves them out): they are copied too, and land if
    ``data`` brings their dependencies. Raises :class:`InvalidUpdate` for
    bytes pycrdt refuses. Costs a copy of the document.
    """
    touched: list[tuple[Any, ...]] = []

    def on_events(events: list[Any]) -> None:
        for event in events:
            where = tuple(event.path)
            keys = getattr(event, "keys", None)
            if isinstance(keys, dict):
                touched.extend((*where, key) for key in keys)
            else:
                touched.append(where)

    with translate_failures(lambda exc: InvalidUpdate.from_failure(exc, data)):
        twin = ydoc.observed_copy(doc, [pending, data], on_events)
    root = twin.get(ydoc.ROOT, type=Map)
    deepest = 0
    for where in touched:
        node: Any = root
        for key in where:
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                node = MISSING
                break
        if node is not MISSING:
            deepest = max(deepest, len(where) + _crdt_nesting(node))
    return deepest


def _crdt_nesting(value: Any) -> int:
    """:func:`crdt_state.values.nesting` for pycrdt values (no recursion)."""
    containers = (Map, Array, dict, list)
    if not isinstance(value, containers):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        children = node.values() if isinstance(node, (Map, dict)) else node
        for child in children:
            if isinstance(child, containers):
                stack.append((child, level + 1))
    return deepest
