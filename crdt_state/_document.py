"""The pycrdt side: writing plain values into a Yjs document and reading them back.

State values go into and come out of a document only through these
functions; the modules that hold a document (``state``, ``replication``,
``durable``, ``schema``, ``storage``) use pycrdt directly only to create one,
to apply, observe or merge updates, to read state vectors and to write the
bookkeeping entries of the meta root. Handles to nested types are never kept
beyond the transaction that looked them up.

**Layout.** The document's root is a ``Y.Map`` named ``state``; nested dicts
are ``Y.Map``, lists are ``Y.Array`` (also inside lists: a dict in a list is a
``Y.Map``), scalars are stored as they are. Inside a ``Y.Array``, each run of
consecutive scalars is one Yjs item whose ``ContentAny`` holds the whole run,
exactly what Yjs writes for ``array.insert(i, [...])`` and what pycrdt leaves
after squashing its one-by-one inserts.

**Writing lists in linear time.** pycrdt 0.14 inserts list items one at a
time, each insert walking the array (16,000 items: ~10 s). So the content of
every non-empty list or dict value, and every append, is written as *one*
hand-built Yjs update (:mod:`crdt_state._yupdate`), applied inside the caller's
open transaction: the container itself (or the first item of an empty list)
is created through pycrdt, the rest is integrated from the update in O(n).
The result is byte-identical to what pycrdt's own API writes, the transaction
still emits one update holding everything it wrote, and the update is
checked to have been integrated whole (never left pending).

**Reading** a map or list goes through yrs' JSON rendering (linear) instead
of pycrdt's ``to_py()``, which looks each list item up from the start of the
list; numbers are then normalised as everywhere else. Content only a foreign
Yjs peer can write reads as JSON renders it: a non-finite number as ``None``,
binary as a list of byte values, a ``Y.Text`` as its string.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from pycrdt import Array, Doc, Map, Text, XmlElement, XmlFragment, XmlText

from ._yupdate import ItemId, UpdateWriter
from .errors import CrdtStateError
from .paths import Path
from .values import MISSING, normalize_number
from .version import VersionVector

__all__ = [
    "META_ROOT",
    "ROOT",
    "doc_delete",
    "doc_extend",
    "doc_from_content",
    "doc_read",
    "doc_set",
    "doc_snapshot",
    "from_crdt",
    "to_crdt",
]

ROOT: Final = "state"
"""Name of the root ``Y.Map`` every peer reads."""

META_ROOT: Final = "crdt_state_meta"
"""A second root map for bookkeeping writes (version ticks), ignored by readers."""


_YRS_2_63: Final = 2**63 - 1
"""How yrs renders the double 2**63 in JSON (a saturating cast to int64).

yrs writes an integral double within int64 as an integer literal and any
other double like JavaScript (``1.8446744073709552e+19``). ``2**63 - 1``
itself is not storable (see :mod:`crdt_state.values`), so this literal can
only be that double.
"""

SMALL_VALUE: Final = 32
"""Values of at most this many list items and map entries (all depths) go through pycrdt.

pycrdt's own inserts cost O(n^2) for n list items but have the least fixed
cost (about 40 us less per write than building an update); up to this size
the quadratic term is negligible. Both ways write the same bytes.
"""

SMALL_APPEND: Final = 4
"""Appends of at most this many items (and :data:`SMALL_VALUE` nodes) go through pycrdt.

Each pycrdt insert walks the list's blocks once; the update path walks them
once in all, whatever the number of items.
"""


def to_crdt(value: Any) -> Any:
    """A pycrdt preliminary value for already-normalised plain data.

    Integrating it costs O(n^2) for a list of n items (pycrdt inserts one by
    one); :func:`doc_set` uses it only for values of at most
    :data:`SMALL_VALUE` items and entries.
    """
    if isinstance(value, dict):
        return Map({k: to_crdt(v) for k, v in value.items()})
    if isinstance(value, list):
        return Array([to_crdt(v) for v in value])
    return value


_TEXTS = (Text, XmlText, XmlElement, XmlFragment)


def from_crdt(value: Any) -> Any:
    """Plain data for a value read from the document, normalised like writes."""
    if isinstance(value, (Map, Array)):
        return _plain(value)
    if isinstance(value, _TEXTS):  # a peer's Y.Text or XML: its text, as the JSON
        return str(value)  # rendering of its parent map gives it
    return normalize_number(value)


def _plain(shared: Map[Any] | Array[Any]) -> Any:
    """A map or list as plain data, through yrs' JSON rendering (linear in its size)."""
    return _normalize_json(json.loads(str(shared)))


def _normalize_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalize_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize_json(v) for v in value]
    if value == _YRS_2_63 and type(value) is int:
        return 2.0**63
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

    ``doc`` is the document or its root ``state`` map (the same for all these
    helpers). ``value`` is normalised plain data. Linear in the size of ``value``.
    """
    parent = _node(doc, path[:-1], create=True)
    assert parent is not None
    _put(parent, path[-1], value)


def _put(parent: Map[Any], key: str, value: Any) -> None:
    """``parent[key] = value``: the container through pycrdt, its content as one update."""
    if not isinstance(value, (dict, list)) or _nodes(value, SMALL_VALUE) <= SMALL_VALUE:
        parent[key] = to_crdt(value)
        return
    doc = parent.doc
    client = doc.client_id
    clock = _next_clock(doc)
    writer = UpdateWriter(client, clock + 1)  # the container takes ``clock``
    writer.fill(value, (client, clock))  # built first: a bad value raises before any write
    parent[key] = Map() if isinstance(value, dict) else Array()
    _integrate(doc, writer)


def doc_delete(doc: Doc[Any] | Map[Any], path: Path) -> bool:
    """Remove ``path``; False when it was not there."""
    parent = _node(doc, path[:-1], create=False)
    if parent is None or path[-1] not in parent:
        return False
    del parent[path[-1]]
    return True


def doc_extend(doc: Doc[Any] | Map[Any], path: Path, items: list[Any]) -> None:
    """Append ``items`` to the array at ``path``, creating it when absent.

    Inside an open transaction; linear in ``len(items)`` (plus one walk over
    the existing list's blocks to find its last item).
    """
    parent = _node(doc, path[:-1], create=True)
    assert parent is not None
    current = parent.get(path[-1])
    if isinstance(current, Array):
        _extend(current, items)
    else:
        _put(parent, path[-1], items)


def _extend(array: Array[Any], items: list[Any]) -> None:
    """Append ``items`` to ``array`` as one update, after its last visible item."""
    if not items:
        return
    if len(items) <= SMALL_APPEND and _nodes(items, SMALL_VALUE) <= SMALL_VALUE:
        array.extend([to_crdt(v) for v in items])
        return
    doc = array.doc
    client = doc.client_id
    clock = _next_clock(doc)
    length = len(array)
    if length:
        found = array.sticky_index(length - 1).to_json()["item"]
        origin: ItemId = (int(found["client"]), int(found["clock"]))
        writer = UpdateWriter(client, clock)
        writer.sequence(items, origin=origin)
        _integrate(doc, writer)
        return
    # An empty list has no item to follow, and pycrdt does not tell its own id:
    # the first item goes in through pycrdt (it takes ``clock``), the rest follow it.
    first = items[0]
    container = isinstance(first, (dict, list))
    writer = UpdateWriter(client, clock + 1)
    if container and first:
        writer.fill(first, (client, clock))
    if len(items) > 1:
        writer.sequence(items[1:], origin=(client, clock))
    array.append(to_crdt(type(first)()) if container else first)
    _integrate(doc, writer)


def _nodes(value: Any, limit: int) -> int:
    """How many list items and map entries ``value`` holds, at every depth.

    Counting stops once past ``limit`` (the count returned is then above it).
    """
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return 0
    count = len(items)
    if count > limit:
        return count
    for item in items:
        if isinstance(item, (dict, list)):
            count += _nodes(item, limit - count)
            if count > limit:
                break
    return count


def _next_clock(doc: Doc[Any]) -> int:
    """The clock the next item written by ``doc``'s own client gets."""
    return VersionVector.from_state(doc.get_state()).get_clock(doc.client_id)


def _integrate(doc: Doc[Any], writer: UpdateWriter) -> None:
    """Apply the writer's update inside the open transaction; check it was integrated whole."""
    if writer.empty:
        return
    doc.apply_update(writer.update())
    clock = _next_clock(doc)
    if clock != writer.clock:  # never expected: the update would be pending, not applied
        raise CrdtStateError(
            "a list write was not integrated by the document",
            details={"expected_clock": writer.clock, "clock": clock},
        )


def observed_copy(
    doc: Doc[Any], updates: list[bytes | None], on_events: Callable[[list[Any]], None]
) -> Doc[Any]:
    """A copy of ``doc`` (from its encoding), ``updates`` applied to it in order.

    ``None`` updates are skipped; ``on_events`` observes the ``state`` map's deep events
    meanwhile. ``doc`` is not modified; pycrdt's errors (and panics) propagate to the caller.
    """
    twin: Doc[Any] = Doc()
    twin.apply_update(doc.get_update())
    twin_root = twin.get(ROOT, type=Map)
    sub = twin_root.observe_deep(on_events)
    try:
        for update in updates:
            if update is not None:
                twin.apply_update(update)
    finally:
        twin_root.unobserve(sub)
    return twin


def doc_read(doc: Doc[Any] | Map[Any], path: Path) -> Any:
    """Plain data at ``path`` (of the document or of its root map), or :data:`MISSING`.

    One read transaction for the whole walk (each lookup would open its own).
    """
    node: Any = _root_of(doc)
    with node.doc.transaction():
        for key in path:
            if not isinstance(node, Map) or key not in node:
                return MISSING
            node = node[key]
        return from_crdt(node)


def doc_snapshot(doc: Doc[Any]) -> dict[str, Any]:
    """The whole ``state`` map as plain, normalised data."""
    out = _plain(root(doc))
    return out if isinstance(out, dict) else {}
