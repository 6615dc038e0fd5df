"""What a Yjs update wrote: paths from pycrdt's deep events, copied into the mirror.

Used when a received update is integrated (:mod:`crdt_state._replication`), when
a stored log is replayed on reopening (:mod:`crdt_state._durable`) and when a
failed write is rolled back (:mod:`crdt_state._rollback`). No state, no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pycrdt import Array, Doc, Map, merge_updates

from . import _document as ydoc
from .conflicts import WriteKind
from .paths import Path
from .values import MISSING, depth_of, tree_delete, tree_get, tree_set

__all__ = [
    "collect_writes",
    "event_changes",
    "join_updates",
    "mirror_writes",
    "root_most",
    "written_depth",
]


def written_depth(mirror: dict[str, Any], writes: Iterable[Path]) -> int:
    """The depth (:func:`crdt_state.values.depth_of`) of the deepest value at ``writes``."""
    deepest = 0
    for path in writes:
        deepest = max(deepest, depth_of(path, tree_get(mirror, path)))
    return deepest


_RAW_ARRAY: type = type(Doc[Any]().get("a", type=Array).integrated)
# the type pycrdt's raw deep events (crdt_state._deep) carry for a list; its wrapped
# events carry an ``Array``


def collect_writes(
    changed: dict[Path, WriteKind], mirror: dict[str, Any]
) -> Callable[[list[Any]], None]:
    """An ``observe_deep`` callback adding the paths each event writes to ``changed``.

    ``mirror`` must still hold the values from before the update (list lengths
    tell appends from other edits). A path written with two kinds counts as
    ``"set"``.
    """

    def on_events(events: list[Any]) -> None:
        for event in events:
            for path, kind in event_changes(event, mirror):
                changed[path] = "set" if changed.get(path, kind) != kind else kind

    return on_events


def mirror_writes(
    doc: Doc[Any] | Map[Any], mirror: dict[str, Any], writes: Iterable[Path]
) -> list[tuple[Path, Any]]:
    """Copy the values at ``writes`` from ``doc`` (or its root map) into ``mirror``.

    Returns the undo records.

    Each undo record is ``(path, value before)`` (:data:`MISSING` when absent),
    as the change log keeps them for reading older versions.
    """
    undo: list[tuple[Path, Any]] = []
    for path in writes:
        undo.append((path, tree_get(mirror, path)))
        value = ydoc.doc_read(doc, path)
        if value is MISSING:
            tree_delete(mirror, path, missing_ok=True)
        else:
            tree_set(mirror, path, value, force=True)
    return undo


def writes_by_diff(root: Map[Any], mirror: dict[str, Any]) -> dict[Path, WriteKind]:
    """The root keys whose values in ``root`` differ from ``mirror``'s, as writes.

    For an update whose events pycrdt could not report: each key whose value differs
    counts as ``"set"`` (``"delete"`` when gone), a coarser record than its events would
    have given (a conflict check then sees more, never less). Reads the whole root.
    """
    writes: dict[Path, WriteKind] = {}
    for key in set(mirror).union(root.keys()):
        value = ydoc.doc_read(root, (key,))
        if value is MISSING:
            if key in mirror:
                writes[(key,)] = "delete"
        elif key not in mirror or mirror[key] != value:
            writes[(key,)] = "set"
    return writes


def root_most(changed: dict[Path, WriteKind]) -> dict[Path, WriteKind]:
    """The written paths that have no written ancestor (a write covers its subtree)."""
    keys = set(changed)
    return {p: k for p, k in changed.items() if not any(p[:i] in keys for i in range(1, len(p)))}


def event_changes(event: Any, mirror: dict[str, Any]) -> list[tuple[Path, WriteKind]]:
    """The ``(path, kind)`` writes one pycrdt deep event (raw or wrapped) stands for.

    A map event writes (or deletes) each changed key; an array event writes the
    whole list at its path, as an ``"append"`` when it only inserted at the end
    of the list ``mirror`` holds there. Edits inside a list are a write of the
    outermost list.
    """
    raw = list(event.path)
    cut = next((i for i, k in enumerate(raw) if not isinstance(k, str)), None)
    base: Path = tuple(raw if cut is None else raw[:cut])
    if cut is not None:
        return [(base, "set")] if base else []
    keys = getattr(event, "keys", None)
    if isinstance(keys, dict):
        return [((*base, key), _key_write(change)) for key, change in keys.items()]
    delta = getattr(event, "delta", None) or []
    if not base or not delta:  # no delta: an item born deleted (a peer's insert and
        return []  # delete, sent together) changed nothing anyone can see
    current = tree_get(mirror, base)
    length = len(current) if isinstance(current, list) else 0
    is_append = (
        len(delta) <= 2
        and all("insert" in d or "retain" in d for d in delta)
        and sum(d.get("retain", 0) for d in delta) == length
        and (len(delta) == 1 or "retain" in delta[0])
    )
    return [(base, "append" if is_append else "set")]


def _key_write(change: dict[str, Any]) -> WriteKind:
    """How a map key changed: a list created where there was none is an append to it.

    That is how a local merge records an append that creates its list, so a
    change reads the same whether it was made here, replayed from a file or
    received from another replica.
    """
    action = change.get("action")
    if action == "delete":
        return "delete"
    if action == "add" and isinstance(change.get("newValue"), (Array, _RAW_ARRAY)):
        return "append"
    return "set"


def join_updates(updates: list[bytes]) -> bytes:
    """One Yjs update holding all of ``updates`` (empty ones skipped; ``b""`` for none)."""
    parts = [u for u in updates if u]
    if not parts:
        return b""
    if len(parts) == 1:
        return parts[0]
    return bytes(merge_updates(*parts))
