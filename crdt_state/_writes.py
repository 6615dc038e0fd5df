"""Writing a merge plan into the state's document and mirror: one transaction, all or nothing.

Every write is checked against :data:`~crdt_state.values.MAX_DEPTH` first
(:class:`UnsupportedValue`, nothing touched). If a write still fails half-way,
every path written so far is restored in the same transaction (see
:mod:`crdt_state.rollback`); that transaction's update (the partial operations
and their compensation, no net change) is logged as an entry that writes
nothing, sent to listeners and stored, so replicas and the store stay
identical to the document; then :class:`WriteFailed` is raised
(``KeyboardInterrupt`` and friends are re-raised as they are, after the rollback).
"""

from __future__ import annotations

from typing import Any

from . import document as ydoc
from ._core import StateCore
from .changelog import Entry, TruncateTo
from .conflicts import Change, Conflict, StateUpdate, WriteKind
from .errors import INTERRUPTS
from .paths import Path
from .planner import writes_depth
from .requests import RequestKey
from .rollback import roll_back, undo_record, write_failed
from .values import MISSING, copy_value, tree_delete, tree_get, tree_set
from .version import VersionVector

__all__ = ["apply_writes"]


def apply_writes(
    core: StateCore,
    plan: list[Change],
    agent: str | None,
    conflicts: tuple[Conflict, ...],
    request: RequestKey | None = None,
) -> tuple[Entry, StateUpdate | None]:
    """Write ``plan`` into ``core`` (under its lock) and record the change.

    Args:
        core: the state's core.
        plan: the writes, disjoint paths, values prepared.
        agent: who merges.
        conflicts: the conflicts the merge met (told with the change).
        request: the request key of the merge, if any.

    Returns:
        The change-log entry and the :class:`StateUpdate` (``None`` when no
        listener and no store need it).

    Raises:
        UnsupportedValue: a value is too deep (nothing touched).
        WriteFailed: a write failed and was rolled back.
    """
    depth = writes_depth(plan)  # validated before the document is touched
    undo: list[tuple[Path, Any]] = []
    writes: dict[Path, WriteKind] = {}
    created = False
    failure: BaseException | None = None
    failed_at: Path | None = None
    rolled_back = True
    mirror, root = core.mirror, core.root
    core.updates.clear()
    with core.doc.transaction(origin=agent):
        try:
            for op in plan:
                failed_at = op.path
                if op.kind == "delete":
                    before = tree_get(mirror, op.path)
                    if before is MISSING:
                        continue
                    undo.append((op.path, before))
                    ydoc.doc_delete(root, op.path)
                    tree_delete(mirror, op.path)
                    writes[op.path] = "delete"
                    continue
                current = tree_get(mirror, op.path) if op.kind == "append" else MISSING
                if isinstance(current, list):
                    undo.append((op.path, TruncateTo(len(current))))
                    ydoc.doc_extend(root, op.path, op.value)
                    current.extend(copy_value(op.value))
                    writes[op.path] = "append"
                else:
                    record = undo_record(mirror, op.path)
                    undo.append(record)
                    if op.kind == "append":
                        ydoc.doc_extend(root, op.path, op.value)
                    else:
                        ydoc.doc_set(root, op.path, op.value)
                    tree_set(mirror, op.path, copy_value(op.value), force=True)
                    # a list written where there was none is an append to an empty list:
                    # recorded so, it reads the same as when replayed or received elsewhere
                    created_list = isinstance(op.value, list) and record[1] is MISSING
                    writes[op.path] = "append" if created_list else op.kind
                created = True
            failed_at = None
            if writes and not created:
                core.tick()
        except BaseException as exc:  # a pycrdt panic is a BaseException
            failure = exc
            rolled_back = roll_back(core.doc, mirror, undo)
        # read inside the open transaction: no second transaction (saves ~1 us)
        state = core.doc.get_state()
    if failure is not None:
        _record_failed_write(core, agent, undo, rolled_back, state)
        if isinstance(failure, INTERRUPTS):
            raise failure
        raise write_failed(failure, failed_at, agent, rolled_back) from failure
    if depth > core.depth_mark:
        core.depth_mark = depth
    return core.record(agent, writes, undo, "local", conflicts, state=state, request=request)


def _record_failed_write(
    core: StateCore,
    agent: str | None,
    undo: list[tuple[Path, Any]],
    rolled_back: bool,
    state: bytes,
) -> None:
    """Log (and store) the transaction of a failed write if it reached the document.

    Rolled back, it writes nothing: an entry with no writes keeps the log's
    token equal to the document's. Otherwise the paths it touched are
    logged as written, with their values before.
    """
    if VersionVector.from_state(state) == core.log.head_token:
        core.updates.clear()  # nothing reached the document
        return
    writes: dict[Path, WriteKind] = {} if rolled_back else {p: "set" for p, _ in undo}
    _, change = core.record(agent, writes, [] if rolled_back else undo, "local", state=state)
    core.store_change(change)
