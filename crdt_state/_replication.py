"""Replication: the Yjs updates a state sends to and receives from other replicas.

:func:`apply_update` integrates an update from any Yjs peer into a state's
core, logged as a change with origin ``"remote"`` so that branches forked
earlier see its writes as concurrent.

Depth. An update that would store a value deeper than
:data:`~crdt_state.values.MAX_DEPTH` is refused (:class:`UnsupportedValue`)
before it is applied, in three steps from cheap to exact: an update of ``n``
bytes nests at most ``n / 2`` levels, so a small one under a shallow state is
accepted at once; otherwise :func:`crdt_state._update_scan.depth_bound` reads a
bound from its bytes (items hanging from the existing document count at the
state's depth mark, an upper bound of the depth of its values); only when that
bound is too high is the update tried on a copy of the document and the
values it writes measured (:func:`update_depth`). Structs Yjs keeps pending
(their dependencies have not arrived) are kept aside and scanned again with
every later update, since they land when it brings their dependencies.
"""

from __future__ import annotations

import logging
from typing import Any

from pycrdt import Array, Doc, Map, get_update

from . import _document as ydoc
from ._core import StateCore
from ._events import collect_writes, join_updates, mirror_writes, root_most, written_depth
from ._update_scan import depth_bound
from .conflicts import MergeResult, WriteKind
from .errors import (
    INTERRUPTS,
    CrdtStateError,
    InvalidUpdate,
    UnsupportedValue,
    translate_failures,
)
from .paths import Path
from .values import MAX_DEPTH, MISSING
from .version import VersionVector

__all__ = ["apply_update", "update_depth"]

log = logging.getLogger("crdt_state.replication")


def _refused(exc: BaseException, data: bytes) -> InvalidUpdate:
    return InvalidUpdate(f"update refused: {exc}", details={"size": len(data)})


def apply_update(
    core: StateCore, update: bytes, agent: str | None
) -> tuple[MergeResult, int | None]:
    """Integrate ``update`` into ``core``; returns the result and the store's ticket.

    A follower (``core.validate_updates`` off) checks neither depth nor schema: its
    authority validated what it sends; one with ``core.check_depth`` on still
    checks the depth (a hub client's replica: a faulty hub must not break it).

    Args:
        core: the state's core.
        update: a Yjs update (bytes-like).
        agent: recorded as the change's agent.

    Raises:
        InvalidUpdate: not bytes, or bytes pycrdt refuses (nothing changed).
        UnsupportedValue: the update would store a value too deep (nothing changed).
        SchemaError: a typed state refuses what the update writes.
        StateClosed: the state is closed.
    """
    if not isinstance(update, (bytes, bytearray, memoryview)):
        raise InvalidUpdate("an update is bytes", details={"type": type(update).__name__})
    data = bytes(update)
    with core.lock:
        core.check_writable()
        core.shared = True
        before = core.log.head_token
        changed: dict[Path, WriteKind] = {}
        # structs Yjs keeps pending land with this update: they are checked with it, and
        # bytes pycrdt cannot even merge with them are refused here, nothing changed
        joined = data
        if core.held is not None:
            with translate_failures(lambda exc: _refused(exc, data)):
                joined = join_updates([core.held, data])
        if core.validate_updates and core.schema is not None:  # a follower's authority
            core.schema.check_update(core.doc, joined)  # validated what it sends
        if core.check_depth:
            _check_update_depth(core, data, joined)
        core.updates.clear()
        # outermost: a failure of pycrdt while it reports the update's changes (a panic
        # reading an event of garbage it integrated) is refused too, never a raw panic
        with (
            translate_failures(lambda exc: _refused(exc, data), keep=(CrdtStateError,)),
            core.deep.routed(core.root, collect_writes(changed, core.mirror)),
        ):
            core.doc.apply_update(data)
        state = core.doc.get_state()
        _hold_pending(core, joined, state)
        after = VersionVector.from_state(state)
        writes = root_most(changed)
        if after == before and not writes:
            return MergeResult(token=before, agent=agent), None
        undo = mirror_writes(core.root, core.mirror, writes)
        core.depth_mark = max(core.depth_mark, written_depth(core.mirror, writes))
        core.updates.clear()
        tick_update = b""
        if after == before and core.tick_remote:
            with core.doc.transaction(origin="crdt-state"):
                core.tick()
            tick_update = b"".join(core.updates)
        outgoing = join_updates([data, tick_update]) if tick_update else data
        if tick_update:
            state = core.doc.get_state()
        entry, change = core.record(agent, writes, undo, "remote", update=outgoing, state=state)
        ticket = core.store_change(change)
    result = MergeResult(token=entry.token, applied=tuple(writes), fast_forward=True, agent=agent)
    return result, ticket


def _check_update_depth(core: StateCore, data: bytes, joined: bytes) -> None:
    """Refuse (:class:`UnsupportedValue`) an update storing values deeper than the limit.

    Cheap first (the size of the update, then a scan of its bytes with the structs
    held pending, ``joined``), exact on a copy of the document only when those cannot
    rule it out. Called under the lock, before the update is applied.
    """
    if core.held is None and max(core.depth_mark, 1) + len(data) // 2 <= MAX_DEPTH:
        # an item sits at most at the mark (level 1 under the root), and every level
        # of nesting below it takes at least two bytes: a nested type's child names its
        # parent, a plain list or map has a tag and a length, JSON text two brackets
        return
    try:
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


def _hold_pending(core: StateCore, joined: bytes, state: bytes) -> None:
    """Keep what the document left pending of ``joined`` (this update, the earlier held).

    Called once the update is applied, so it never raises: the change must still be
    recorded. Should pycrdt fail to read the pending structs back, nothing is held
    (later updates are then checked without them) and a warning is logged.
    """
    try:
        rest = bytes(get_update(joined, state))
    except BaseException as exc:
        if isinstance(exc, INTERRUPTS):
            raise
        log.warning("pending structs dropped: pycrdt could not read them back (%s)", exc)
        core.held = None
        return
    core.held = None if rest[:1] == b"\x00" else rest


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

    twin: Doc[Any] = Doc()
    with translate_failures(lambda exc: _refused(exc, data)):
        twin.apply_update(doc.get_update())
        root = twin.get(ydoc.ROOT, type=Map)
        sub = root.observe_deep(on_events)
        try:
            if pending is not None:
                twin.apply_update(pending)
            twin.apply_update(data)
        finally:
            root.unobserve(sub)
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
