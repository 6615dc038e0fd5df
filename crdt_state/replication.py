"""Replication: the Yjs updates a :class:`~crdt_state.SharedState` sends and receives.

:class:`ReplicationMixin` gives ``SharedState`` its replica side: the Yjs
update to send another replica (``get_update``) and the integration of one
received from any Yjs peer (``apply_update``), logged as a change with origin
``"remote"`` so that branches forked earlier see its writes as concurrent.
The plain functions below find which paths an update wrote (from pycrdt's
deep events) and copy those paths from the document into the mirror; restoring
a durable state (:mod:`crdt_state.durable`) replays stored updates with them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from pycrdt import Array, Doc, Map, merge_updates

from . import document as ydoc
from .changelog import ChangeLog, Entry, WriteKind
from .conflicts import MergeResult
from .errors import InvalidUpdate
from .paths import Path
from .values import MISSING, tree_delete, tree_get, tree_set
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
    _tick: Callable[[], None]
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
        :class:`InvalidUpdate` and change nothing. Writes from updates are
        logged, so branches forked earlier see them as concurrent changes.
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
            self._shared = True
            before = self._log.head_token
            changed: dict[Path, WriteKind] = {}
            if self._schema is not None and self._validate_updates:
                self._schema.check_update(self._doc, data)
            sub = self._root.observe_deep(collect_writes(changed, self._mirror))
            self._updates.clear()
            try:
                self._doc.apply_update(data)
            except Exception as exc:  # pycrdt reports bad updates as ValueError
                raise InvalidUpdate(f"update refused: {exc}", details={"size": len(data)}) from exc
            except BaseException as exc:  # PanicException from the Rust core
                if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                    raise
                raise InvalidUpdate(f"update refused: {exc}", details={"size": len(data)}) from exc
            finally:
                self._root.unobserve(sub)
            after = VersionVector.from_state(self._doc.get_state())
            writes = root_most(changed)
            if after == before and not writes:
                return MergeResult(token=before, agent=origin), None
            undo = mirror_writes(self._doc, self._mirror, writes)
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
