"""Rolling back a half-written merge: every written path back to its value before.

A Yjs document has no abort: operations written into an open transaction are
in the document for good. When writing a merge fails half-way (a pycrdt
panic, a ``RecursionError``, any exception), :func:`undo_writes` writes the
old values back *in the same transaction*, newest first, in the document and
in the plain mirror. The transaction then carries the partial operations and
their compensation; its net effect on the content is nothing, and its update
is still sent to listeners and to the journal, so every replica and the file
replay exactly the same operations and end with the same content (the
alternative, rebuilding the document, would give it a new identity that
replicas holding the old one cannot follow).
"""

from __future__ import annotations

from typing import Any

from pycrdt import Array, Doc, Map

from . import _document as ydoc
from ._changelog import TruncateTo
from ._events import mirror_writes
from .errors import INTERRUPTS, WriteFailed
from .paths import Path
from .values import MISSING, copy_value, tree_delete, tree_get, tree_set

__all__ = ["roll_back", "undo_record", "undo_writes", "write_failed"]


def undo_record(mirror: dict[str, Any], path: Path) -> tuple[Path, Any]:
    """How to undo a write at ``path``: the highest missing ancestor, or the old value.

    An ancestor holding a non-map (which the write replaces by a map) is
    recorded with that value.
    """
    node: Any = mirror
    for i, key in enumerate(path):
        child = node.get(key, MISSING) if isinstance(node, dict) else MISSING
        if child is MISSING or (i < len(path) - 1 and not isinstance(child, dict)):
            return path[: i + 1], child
        node = child
    return path, node


def roll_back(doc: Doc[Any], mirror: dict[str, Any], undo: list[tuple[Path, Any]]) -> bool:
    """Undo the writes of a failed transaction, inside it; False if that failed too.

    When the rollback itself fails, the written paths are read back from the
    document into the mirror (or, if even that fails, the whole mirror), so
    the two still agree. ``KeyboardInterrupt`` and friends propagate.
    """
    try:
        undo_writes(ydoc.root(doc), mirror, undo)
        return True
    except BaseException as exc:
        if isinstance(exc, INTERRUPTS):
            raise
    try:
        mirror_writes(doc, mirror, [path for path, _ in undo])
    except BaseException as exc:  # the document cannot even be read: rebuild the mirror
        if isinstance(exc, INTERRUPTS):
            raise
        mirror.clear()
        mirror.update(ydoc.doc_snapshot(doc))
    return False


def undo_writes(root: Map[Any], mirror: dict[str, Any], undo: list[tuple[Path, Any]]) -> None:
    """Restore each ``(path, value before)`` of ``undo``, newest first, in ``root`` and ``mirror``.

    ``undo`` holds the records of the change log (:data:`MISSING` = was
    absent, :class:`TruncateTo` = the list was shorter), each recorded
    *before* its write started, so a write that failed half-way is undone
    too. Must run inside the transaction that made the writes. Exceptions
    propagate (the caller then re-reads the document).
    """
    for path, before in reversed(undo):
        if isinstance(before, TruncateTo):
            _truncate(root, path, before.length)
            current = tree_get(mirror, path)
            if isinstance(current, list):
                del current[before.length :]
        elif before is MISSING:
            ydoc.doc_delete(root, path)
            tree_delete(mirror, path, missing_ok=True)
        else:
            ydoc.doc_set(root, path, before)
            tree_set(mirror, path, copy_value(before), force=True)


def _truncate(root: Map[Any], path: Path, length: int) -> None:
    """Cut the array at ``path`` back to ``length`` items, in place.

    Concurrent appends by other replicas to the same array survive.
    """
    node: Any = root
    for key in path:
        if not isinstance(node, Map) or key not in node:
            return
        node = node[key]
    if isinstance(node, Array) and len(node) > length:
        del node[length:]


def write_failed(
    failure: BaseException, path: Path | None, agent: str | None, rolled_back: bool
) -> WriteFailed:
    """The :class:`WriteFailed` reporting ``failure`` at ``path`` (chain it with ``from``)."""
    message = (
        "writing the merge failed and was rolled back"
        if rolled_back
        else "writing the merge failed, and so did its rollback"
    )
    return WriteFailed(
        f"{message}: {failure!r}",
        path=path,
        details={"cause": repr(failure), "agent": agent, "rolled_back": rolled_back},
    )
