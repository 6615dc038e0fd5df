"""Replication: the Yjs updates a :class:`~crdt_state.SharedState` sends and receives.

:class:`ReplicationMixin` gives ``SharedState`` its replica side: the Yjs
update to send another replica (``get_update``) and the integration of one
received from any Yjs peer (``apply_update``), logged as a change with origin
``"remote"`` so that branches forked earlier see its writes as concurrent.
The plain functions below find which paths an update wrote (from pycrdt's
deep events) and copy those paths from the document into the mirror; restoring
a durable state (:mod:`crdt_state.durable`) replays stored updates with them.

Depth. An update that would store a value deeper than
:data:`~crdt_state.values.MAX_DEPTH` is refused (:class:`UnsupportedValue`)
before it is applied, in three steps from cheap to exact: an update of ``n``
bytes nests at most ``n / 2`` levels, so a small one under a shallow state is
accepted at once; otherwise :func:`crdt_state.update_scan.depth_bound` reads a
bound from its bytes (items hanging from the existing document count at the
state's depth mark, an upper bound of the depth of its values); only when that
bound is too high is the update tried on a copy of the document and the
values it writes measured. Structs Yjs keeps pending (their dependencies have
not arrived) are kept aside and scanned again with every later update, since
they land when it brings their dependencies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from pycrdt import Array, Doc, Map, get_update, merge_updates

from . import document as ydoc
from .changelog import ChangeLog, Entry, WriteKind
from .conflicts import MergeResult
from .errors import INTERRUPTS, InvalidUpdate, UnsupportedValue
from .paths import Path
from .update_scan import depth_bound
from .values import MAX_DEPTH, MISSING, depth_of, tree_delete, tree_get, tree_set
from .version import VersionVector

if TYPE_CHECKING:
    from .schema import StateSchema
    from .state import Journal, StateUpdate

__all__ = [
    "ReplicationMixin",
    "collect_writes",
    "event_changes",
    "join_updates",
    "mirror_writes",
    "root_most",
    "written_depth",
]


class ReplicationMixin:
    """Sending and integrating Yjs updates (part of :class:`~crdt_state.SharedState`).

    Uses the state's lock, document, mirror, change log and journal, and its
    ``_record``/``_tick``/``_settle``/``_asettle`` (declared below for typing).
    """

    _lock: threading.RLock
    _doc: Doc[Any]
    _root: Map[Any]
    _mirror: dict[str, Any]
    _log: ChangeLog
    _updates: list[bytes]
    _journal: Journal | None
    _schema: StateSchema | None
    _shared: bool
    _tick_remote: bool
    _validate_updates: bool
    _depth_mark: int
    _held: bytes | None
    _tick: Callable[[], None]
    _check_open: Callable[[], None]
    _record: Callable[..., tuple[Entry, StateUpdate | None]]
    _settle: Callable[[int | None], None]
    _asettle: Callable[[int | None], Coroutine[Any, Any, None]]

    def get_update(self, since: VersionVector | None = None) -> bytes:
        """A Yjs update with everything this state has beyond ``since`` (all when None)."""
        with self._lock:
            self._shared = True
            if since is None:
                return bytes(self._doc.get_update())
            return bytes(self._doc.get_update(since.to_state()))

    def apply_update(self, update: bytes, *, origin: str | None = None) -> MergeResult:
        """Integrate a Yjs update from another replica (any Yjs peer).

        Updates are idempotent and commutative: applying one twice, or several
        in any order, gives the same state. Malformed bytes raise
        :class:`InvalidUpdate`, and an update that would store a value deeper
        than :data:`~crdt_state.values.MAX_DEPTH` raises
        :class:`UnsupportedValue`; either changes nothing. Writes from updates
        are logged, so branches forked earlier see them as concurrent changes.
        """
        result, ticket = self._apply_update_now(update, origin)
        self._settle(ticket)
        return result

    async def aapply_update(self, update: bytes, *, origin: str | None = None) -> MergeResult:
        """:meth:`apply_update` for asyncio code (the disk wait does not block the loop)."""
        result, ticket = self._apply_update_now(update, origin)
        await self._asettle(ticket)
        return result

    def _apply_update_now(
        self, update: bytes, origin: str | None
    ) -> tuple[MergeResult, int | None]:
        """Integrate ``update`` under the lock; returns the result and its journal ticket."""
        if not isinstance(update, (bytes, bytearray, memoryview)):
            raise InvalidUpdate("an update is bytes", details={"type": type(update).__name__})
        data = bytes(update)
        with self._lock:
            self._check_open()
            self._shared = True
            before = self._log.head_token
            changed: dict[Path, WriteKind] = {}
            if self._schema is not None and self._validate_updates:
                # structs Yjs keeps pending land with this update: validated with it
                held = data if self._held is None else join_updates([self._held, data])
                self._schema.check_update(self._doc, held)
            self._check_update_depth(data)
            sub = self._root.observe_deep(collect_writes(changed, self._mirror))
            self._updates.clear()
            try:
                self._doc.apply_update(data)
            except Exception as exc:  # pycrdt reports bad updates as ValueError
                raise InvalidUpdate(f"update refused: {exc}", details={"size": len(data)}) from exc
            except BaseException as exc:  # PanicException from the Rust core
                if isinstance(exc, INTERRUPTS):
                    raise
                raise InvalidUpdate(f"update refused: {exc}", details={"size": len(data)}) from exc
            finally:
                self._root.unobserve(sub)
            state = self._doc.get_state()
            self._hold_pending(data, state)
            after = VersionVector.from_state(state)
            writes = root_most(changed)
            if after == before and not writes:
                return MergeResult(token=before, agent=origin), None
            undo = mirror_writes(self._doc, self._mirror, writes)
            self._depth_mark = max(self._depth_mark, written_depth(self._mirror, writes))
            self._updates.clear()
            tick_update = b""
            if after == before and self._tick_remote:
                with self._doc.transaction(origin="crdt-state"):
                    self._tick()
                tick_update = b"".join(self._updates)
            outgoing = join_updates([data, tick_update]) if tick_update else data
            entry, change = self._record(origin, writes, undo, "remote", update=outgoing)
            ticket = (
                self._journal.record(change)
                if self._journal is not None and change is not None
                else None
            )
        result = MergeResult(
            token=entry.token, applied=tuple(writes), fast_forward=True, agent=origin
        )
        return result, ticket

    def _check_update_depth(self, data: bytes) -> None:
        """Refuse (:class:`UnsupportedValue`) an update storing values deeper than the limit.

        Cheap first (the size of the update, then a scan of its bytes), exact
        on a copy of the document only when those cannot rule it out. Called
        under the lock, before the update is applied.
        """
        if self._held is None and max(self._depth_mark, 1) + len(data) // 2 <= MAX_DEPTH:
            # an item sits at most at the mark (level 1 under the root), and every level
            # of nesting below it takes at least two bytes: a nested type's child names its
            # parent, a plain list or map has a tag and a length, JSON text two brackets
            return
        scanned = data if self._held is None else join_updates([self._held, data])
        try:
            bound = depth_bound(scanned, root=ydoc.ROOT, unknown=self._depth_mark, limit=MAX_DEPTH)
        except (ValueError, IndexError):
            bound = MAX_DEPTH + 1  # unreadable here: let the exact check decide
        if bound <= MAX_DEPTH:
            return
        depth = update_depth(self._doc, data, pending=self._held)
        if depth > MAX_DEPTH:
            raise UnsupportedValue(
                f"update refused: it would store a value {depth} levels deep; "
                f"at most {MAX_DEPTH} are allowed",
                details={"depth": depth, "limit": MAX_DEPTH, "size": len(data)},
            )

    def _hold_pending(self, data: bytes, state: bytes) -> None:
        """Keep the structs of ``data`` (and of earlier updates) the document left pending."""
        held = data if self._held is None else join_updates([self._held, data])
        rest = bytes(get_update(held, state))
        self._held = None if rest[:1] == b"\x00" else rest


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
    try:
        twin.apply_update(doc.get_update())
        root = twin.get(ydoc.ROOT, type=Map)
        sub = root.observe_deep(on_events)
        try:
            if pending is not None:
                twin.apply_update(pending)
            twin.apply_update(data)
        finally:
            root.unobserve(sub)
    except Exception as exc:
        raise InvalidUpdate(f"update refused: {exc}", details={"size": len(data)}) from exc
    except BaseException as exc:  # PanicException from the Rust core
        if isinstance(exc, INTERRUPTS):
            raise
        raise InvalidUpdate(f"update refused: {exc}", details={"size": len(data)}) from exc
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


def written_depth(mirror: dict[str, Any], writes: Iterable[Path]) -> int:
    """The depth (:func:`crdt_state.values.depth_of`) of the deepest value at ``writes``."""
    deepest = 0
    for path in writes:
        deepest = max(deepest, depth_of(path, tree_get(mirror, path)))
    return deepest


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
    doc: Doc[Any], mirror: dict[str, Any], writes: Iterable[Path]
) -> list[tuple[Path, Any]]:
    """Copy the values at ``writes`` from ``doc`` into ``mirror``; returns the undo records.

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


def root_most(changed: dict[Path, WriteKind]) -> dict[Path, WriteKind]:
    """The written paths that have no written ancestor (a write covers its subtree)."""
    keys = set(changed)
    return {p: k for p, k in changed.items() if not any(p[:i] in keys for i in range(1, len(p)))}


def event_changes(event: Any, mirror: dict[str, Any]) -> list[tuple[Path, WriteKind]]:
    """The ``(path, kind)`` writes one pycrdt deep event stands for.

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
    if not base:
        return []
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
    if action == "add" and isinstance(change.get("newValue"), Array):
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
