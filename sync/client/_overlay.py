"""A remote agent's own unconfirmed merges, read on top of its replica (pure logic).

The replica of a remote agent holds only what the hub confirmed. The agent's
merges that are queued (offline) or in flight are kept apart, as an
*overlay*: an ordered list of :class:`OverlayEntry`. Reads of the agent
(snapshots, ``get``, branches) apply those entries' changes on top of the
confirmed values, so an agent reads its own writes at once, and a later merge
computed on top of them names them as its *chain* (:func:`chain_of`).

Nothing here touches the replica's Yjs document: the overlay is plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crdt_state import MISSING, Change, VersionVector
from crdt_state.paths import related
from crdt_state.values import copy_value, tree_delete, tree_get, tree_set

__all__ = [
    "Overlay",
    "OverlayEntry",
    "RemoteToken",
    "apply_changes",
    "chain_of",
    "depends_on",
    "overlay_keys",
    "view_of_key",
    "view_snapshot",
]


@dataclass(frozen=True, slots=True)
class OverlayEntry:
    """One merge of this agent that the replica does not hold yet.

    ``order`` is its place among the agent's merges, ``request_id`` the id it
    was (last) sent with, ``ops`` its changes as sent.
    """

    order: int
    request_id: int
    ops: tuple[Change, ...]
    keys: frozenset[str] = field(init=False, compare=False, repr=False)
    """The top-level keys the changes write."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", frozenset(op.path[0] for op in self.ops))


@dataclass(frozen=True, slots=True)
class Overlay:
    """The overlay at one moment: its entries in order and the top-level keys they write.

    ``generation`` names the outbox's list of entries it was taken from: two
    overlays of one generation differ only by entries appended at the end.
    """

    entries: tuple[OverlayEntry, ...] = ()
    keys: frozenset[str] = frozenset()
    generation: int = 0


class RemoteToken(VersionVector):
    """The hub's confirmed token, plus the agent's overlay that went with a snapshot.

    It compares, hashes and encodes exactly as the :class:`VersionVector` it
    extends (the overlay is not part of the token's value and never goes on the
    wire as such). ``RemoteState.acommit(changes, token)`` uses ``overlay`` to
    name, as the merge's chain, the agent's own merges the snapshot included.
    """

    __slots__ = ("overlay", "seq")

    def __init__(self, token: VersionVector, seq: int, overlay: Overlay | None = None) -> None:
        super().__init__(dict(token))
        self.seq = seq
        """The replica's change-log position of the token."""
        self.overlay = overlay or Overlay()
        """The agent's own merges that the snapshot showed on top of the token."""


def apply_changes(tree: dict[str, Any], ops: Iterable[Change]) -> None:
    """Apply ``ops`` to the plain-data ``tree`` in place, as the hub would write them.

    ``set`` replaces the value (creating parent maps), ``delete`` removes it when
    present, ``append`` extends the list (creating it when absent). A change
    that cannot apply (below or onto a non-container) is skipped: the hub will
    refuse it, and the agent hears of it then.
    """
    for op in ops:
        if op.kind == "set":
            _try_set(tree, op.path, copy_value(op.value))
        elif op.kind == "delete":
            if tree_get(tree, op.path) is not MISSING:
                tree_delete(tree, op.path)
        else:
            current = tree_get(tree, op.path)
            if current is MISSING:
                _try_set(tree, op.path, copy_value(list(op.value)))
            elif isinstance(current, list):
                current.extend(copy_value(list(op.value)))


def _try_set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = tree
    for key in path[:-1]:
        node = node.get(key, MISSING) if isinstance(node, dict) else MISSING
        if node is MISSING:
            break
        if not isinstance(node, dict):
            return
    tree_set(tree, path, value, force=True)


def overlay_keys(entries: Iterable[OverlayEntry]) -> frozenset[str]:
    """The top-level keys the entries write."""
    return frozenset().union(*(entry.keys for entry in entries))


def view_of_key(value: Any, key: str, entries: Iterable[OverlayEntry]) -> Any:
    """The value of top-level ``key`` once the entries' changes are applied to ``value``.

    ``value`` is the confirmed value (:data:`MISSING` when absent; not modified).
    """
    tree: dict[str, Any] = {} if value is MISSING else {key: copy_value(value)}
    for entry in entries:
        if key in entry.keys:
            apply_changes(tree, [op for op in entry.ops if op.path[0] == key])
    return tree.get(key, MISSING)


def view_snapshot(snapshot: dict[str, Any], entries: Iterable[OverlayEntry]) -> dict[str, Any]:
    """``snapshot`` (modified in place and returned) with the entries' changes applied."""
    for entry in entries:
        apply_changes(snapshot, entry.ops)
    return snapshot


def _overlap(earlier: Change, later: Change) -> bool:
    """True when ``later`` depends on ``earlier``: related paths, unless both append to one list.

    Two appends to the same list never conflict and do not build on each other.
    """
    if not related(earlier.path, later.path):
        return False
    return not (earlier.kind == later.kind == "append" and earlier.path == later.path)


def depends_on(earlier: Sequence[Change], later: Sequence[Change]) -> bool:
    """True when a change of ``later`` overlaps a change of ``earlier`` (see :func:`chain_of`)."""
    for a in earlier:
        for b in later:
            if _overlap(a, b):
                return True
    return False


def chain_of(entries: Iterable[OverlayEntry], ops: Sequence[Change]) -> list[OverlayEntry]:
    """The entries a merge of ``ops`` computed on top of them builds on.

    Those that wrote a path related to one of ``ops`` (equal, ancestor or
    descendant), except pairs of appends to the same list. Only they can
    conflict with the merge, and only their failure can invalidate it.
    """
    kinds = {op.path: op.kind for op in ops}
    above = {op.path[:i] for op in ops for i in range(1, len(op.path))}  # strict ancestors
    keys = frozenset(path[0] for path in kinds)

    def builds_on(entry: OverlayEntry) -> bool:
        for earlier in entry.ops:
            path = earlier.path
            kind = kinds.get(path)
            if kind is not None and not (kind == earlier.kind == "append"):
                return True
            if path in above or any(path[:i] in kinds for i in range(1, len(path))):
                return True
        return False

    return [entry for entry in entries if not entry.keys.isdisjoint(keys) and builds_on(entry)]
