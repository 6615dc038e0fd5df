"""The pycrdt side: writing plain values into a Yjs document and reading them back.

State values go into and come out of a document only through these
functions; the modules that hold a document (``state``, ``replication``,
``durable``, ``schema``, ``storage``) use pycrdt directly only to create one,
to apply, observe or merge updates, to read state vectors and to write the
bookkeeping entries of the meta root. The document's root is a ``Y.Map``
named ``state``; nested dicts are ``Y.Map``, lists are ``Y.Array``, scalars
are stored as they are. Handles to nested types are never kept beyond the
transaction that looked them up.
"""

from __future__ import annotations

from typing import Any, Final

from pycrdt import Array, Doc, Map

from .paths import Path
from .values import MISSING, normalize_number

__all__ = [
    "META_ROOT",
    "ROOT",
    "doc_delete",
    "doc_from_content",
    "doc_extend",
    "doc_read",
    "doc_set",
    "from_crdt",
    "to_crdt",
]

ROOT: Final = "state"
"""Name of the root ``Y.Map`` every peer reads."""

META_ROOT: Final = "crdt_state_meta"
"""A second root map for bookkeeping writes (version ticks), ignored by readers."""


def to_crdt(value: Any) -> Any:
    """A pycrdt preliminary value for already-normalised plain data."""
    if isinstance(value, dict):
        return Map({k: to_crdt(v) for k, v in value.items()})
    if isinstance(value, list):
        return Array([to_crdt(v) for v in value])
    return value


def from_crdt(value: Any) -> Any:
    """Plain data for a value read from the document, normalised like writes."""
    if isinstance(value, (Map, Array)):
        return normalize_py(value.to_py())
    return normalize_number(value)


def normalize_py(value: Any) -> Any:
    """Normalise the output of ``to_py()`` (integral floats become ints)."""
    if isinstance(value, dict):
        return {k: normalize_py(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_py(v) for v in value]
    return normalize_number(value)


def doc_from_content(content: dict[str, Any], meta: dict[str, Any] | None = None) -> Doc[Any]:
    """A fresh document (new client id) holding ``content`` and nothing else.

    ``meta`` entries go to the :data:`META_ROOT` map in the same transaction.
    """
    doc: Doc[Any] = Doc()
    state = root(doc)
    with doc.transaction(origin="crdt-state"):
        for key, value in content.items():
            doc_set(state, (key,), value)
        if meta:
            book = doc.get(META_ROOT, type=Map)
            for key, value in meta.items():
                book[key] = value
    return doc


def root(doc: Doc[Any]) -> Map[Any]:
    """The document's ``state`` map."""
    found: Map[Any] = doc.get(ROOT, type=Map)
    return found


def _root_of(target: Doc[Any] | Map[Any]) -> Map[Any]:
    # a root map given directly saves a ``Doc.get`` lookup (about 2 us) per call
    return target if isinstance(target, Map) else root(target)


def _node(doc: Doc[Any] | Map[Any], path: Path, create: bool) -> Map[Any] | None:
    node = _root_of(doc)
    for key in path:
        child = node.get(key)
        if not isinstance(child, Map):
            if not create:
                return None
            node[key] = Map()
            child = node[key]
        node = child
    return node


def doc_set(doc: Doc[Any] | Map[Any], path: Path, value: Any) -> None:
    """Store ``value`` at ``path`` (inside an open transaction), making parent maps.

    ``doc`` is the document or its root ``state`` map (the same for all these helpers).
    """
    parent = _node(doc, path[:-1], create=True)
    assert parent is not None
    parent[path[-1]] = to_crdt(value)


def doc_delete(doc: Doc[Any] | Map[Any], path: Path) -> bool:
    """Remove ``path``; False when it was not there."""
    parent = _node(doc, path[:-1], create=False)
    if parent is None or path[-1] not in parent:
        return False
    del parent[path[-1]]
    return True


def doc_extend(doc: Doc[Any] | Map[Any], path: Path, items: list[Any]) -> None:
    """Append ``items`` to the array at ``path``, creating it when absent."""
    parent = _node(doc, path[:-1], create=True)
    assert parent is not None
    current = parent.get(path[-1])
    if isinstance(current, Array):
        current.extend([to_crdt(v) for v in items])
    else:
        parent[path[-1]] = Array([to_crdt(v) for v in items])


def doc_read(doc: Doc[Any], path: Path) -> Any:
    """Plain data at ``path``, or :data:`MISSING`."""
    node: Any = root(doc)
    for key in path:
        if not isinstance(node, Map) or key not in node:
            return MISSING
        node = node[key]
    return from_crdt(node)


def doc_snapshot(doc: Doc[Any]) -> dict[str, Any]:
    """The whole ``state`` map as plain, normalised data."""
    out = normalize_py(root(doc).to_py())
    return out if isinstance(out, dict) else {}
