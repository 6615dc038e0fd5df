"""CrdtStore: LangGraph's ``BaseStore`` on a shared state.

Items are stored under paths of the state (see
:mod:`crdt_state.langgraph.store_query` for the layout), so graph runs in
other threads, processes (through a hub) and plain agents share them.

What differs from LangGraph's last-write-wins stores: a ``put`` (or
``delete``) of an item that the same task read before (``get`` or
``search``) is judged against the token that read saw. Two graph runs that
both do get -> LLM -> put on one item produce a conflict, settled by the
state's policies for the item's path or raised as
:class:`~crdt_state.ConflictError`; never a silent overwrite. A put without
a prior read is judged against the state as it is (a blind write).
A "task" is the running LangGraph task (its ``checkpoint_ns``), or, outside
a graph, the calling thread / asyncio task.

Each batch reads one snapshot and merges its writes in one merge (puts that
read at different tokens merge in one merge per token). Within a batch, reads
see the state before the batch's writes, and the last write of a key wins.
TTL is not supported (``supports_ttl`` is false); ``query`` is ignored (no
embeddings): results come newest update first.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.config import get_config
from langgraph.store.base import (
    BaseStore,
    GetOp,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    validate_op_namespace,
)

from ..conflicts import Change, MergeResult
from ..paths import Path, parse_path
from ..version import VersionVector
from . import store_query as q
from .binding import Binding

__all__ = ["CrdtStore"]

_KEEP_READS = 10_000


class _Reads:
    """The token each task last read each item at (bounded, least recent dropped)."""

    def __init__(self, keep: int = _KEEP_READS) -> None:
        self._tokens: OrderedDict[tuple[Any, Path], VersionVector] = OrderedDict()
        self._lock = threading.Lock()
        self._keep = keep

    def seen(self, scope: Any, path: Path, token: VersionVector) -> None:
        with self._lock:
            self._tokens[(scope, path)] = token
            self._tokens.move_to_end((scope, path))
            while len(self._tokens) > self._keep:
                self._tokens.popitem(last=False)

    def base(self, scope: Any, path: Path) -> VersionVector | None:
        with self._lock:
            return self._tokens.get((scope, path))


def _scope() -> Any:
    """Who is reading: the LangGraph task, else the thread and asyncio task."""
    try:
        config = get_config()
    except RuntimeError:
        config = None
    if config is not None:
        ns = config.get("configurable", {}).get("checkpoint_ns")
        if ns:
            return ("task", ns)
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return ("thread", threading.get_ident(), id(task) if task is not None else None)


def _agent() -> str:
    try:
        name = get_config().get("metadata", {}).get("langgraph_node")
    except RuntimeError:
        return "store"
    return name if isinstance(name, str) and name else "store"


class CrdtStore(BaseStore):
    """A LangGraph store whose items live in a shared state; conflicts are never silent.

    Args:
        state: a ``SharedState``, or a remote state of a hub room
            (``sync.connect_blocking(...)`` for ``batch``; ``sync.connect(...)``
            serves ``abatch`` only).
        namespace_root: the path under which items are kept (``"store"``).
    """

    supports_ttl = False

    __slots__ = ("_binding", "_reads", "_root")

    def __init__(self, state: object, *, namespace_root: str = "store") -> None:
        self._binding = Binding(state)
        self._root: Path = parse_path(namespace_root)
        self._reads = _Reads()

    @property
    def state(self) -> Any:
        """The state holding the items."""
        return self._binding.state

    def _path(self, namespace: Sequence[str], key: str) -> Path:
        return parse_path((*self._root, q.namespace_key(namespace), str(key)))

    def _plan(
        self, ops: Sequence[Op], snapshot: dict[str, Any], token: VersionVector, scope: Any
    ) -> tuple[list[Result], list[tuple[VersionVector, list[Change]]]]:
        """Answer the reads of a batch and group its writes by fork base (pure but for reads)."""
        root: Any = snapshot
        for key in self._root:
            root = root.get(key) if isinstance(root, dict) else None
        results: list[Result] = []
        writes: dict[Path, PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                path = self._path(op.namespace, op.key)
                record = _record(root, op.namespace, str(op.key))
                results.append(q.item_from_record(tuple(op.namespace), str(op.key), record))
                self._reads.seen(scope, path, token)
            elif isinstance(op, SearchOp):
                found = q.search_items(root, op.namespace_prefix, op.filter, op.limit, op.offset)
                for item in found:
                    self._reads.seen(scope, self._path(item.namespace, item.key), token)
                results.append(found)
            elif isinstance(op, ListNamespacesOp):
                results.append(
                    q.list_namespaces(root, op.match_conditions, op.max_depth, op.limit, op.offset)
                )
            elif isinstance(op, PutOp):
                if op.ttl is not None:
                    raise NotImplementedError("CrdtStore does not support TTL (use ttl=None)")
                writes[self._path(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise ValueError(f"unknown store operation {type(op).__name__}")
        groups: dict[VersionVector, list[Change]] = {}
        now = datetime.now(UTC)
        for path, put in writes.items():
            base = self._reads.base(scope, path) or token
            if put.value is None:
                change = Change("delete", path)
            else:
                previous = _record(root, put.namespace, str(put.key))
                change = Change("set", path, q.new_record(put.value, previous, now))
            groups.setdefault(base, []).append(change)
        return results, list(groups.items())

    def _merged(self, scope: Any, changes: list[Change], result: MergeResult) -> None:
        """After a merge the writer knows the state as of its own write."""
        for change in changes:
            self._reads.seen(scope, change.path, result.token)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations: reads from one snapshot, writes merged (see the module doc)."""
        scope, agent = _scope(), _agent()
        snapshot, token = self._binding.read()
        results, groups = self._plan(list(ops), snapshot, token, scope)
        for base, changes in groups:
            self._merged(scope, changes, self._binding.commit(changes, base, agent))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` for asyncio code."""
        scope, agent = _scope(), _agent()
        snapshot, token = self._binding.read()
        results, groups = self._plan(list(ops), snapshot, token, scope)
        for base, changes in groups:
            self._merged(scope, changes, await self._binding.acommit(changes, base, agent))
        return results


def _record(root: Any, namespace: Sequence[str], key: str) -> Any:
    items = root.get(q.namespace_key(namespace)) if isinstance(root, dict) else None
    return items.get(key) if isinstance(items, dict) else None
