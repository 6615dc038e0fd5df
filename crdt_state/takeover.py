"""Taking over a PostgreSQL key's writes from a writer that is gone: load first, then promote.

A standby that expects to become a key's writer (the hub cluster's contender, once the
owner's lease shows a missed renewal) loads the state *before* it may write:
:func:`preload` opens it ``read_only`` (every write raises ``ReadOnlyStore``), with the
connection already set up as a writer's. Once the caller made sure the old writer
commits no more (the cluster claims a new fencing number, which every commit of the
old writer checks last under a row lock), :func:`promote` reads, in one round trip and
one transaction, what was committed since the load, replays only that, and makes the
state the key's writer. What was committed since is read after that point, so nothing
of the old writer is missed; it starts after the loaded rows' last seq and must follow
it without gap, so nothing is replayed twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from . import _durable
from .errors import StorageError
from .postgres import BeforeCommit, PostgresStore, SharedWriter, open_postgres
from .state import SharedState

__all__ = ["preload", "promote"]


def preload(dsn: str, key: str, **options: Any) -> SharedState:
    """Open ``key`` read-only, its connection ready to take writes (see :func:`promote`).

    ``options`` as :func:`~crdt_state.postgres.open_postgres` (``read_only`` is implied).

    Raises:
        StorageError: as ``open_postgres``; with ``details["reason"]`` ``"missing"`` when
            ``key`` was never stored (there is nothing to load ahead).
    """
    state = open_postgres(dsn, key, **{**options, "read_only": True})
    try:
        _store(state).get_ready()
    except BaseException:
        state.close()
        raise
    return state


def promote(
    state: SharedState,
    before_commit: BeforeCommit | None = None,
    *,
    lock: bool | None = None,
    setup: Callable[[psycopg.Connection[Any]], None] | None = None,
    writer: SharedWriter | None = None,
) -> int:
    """Make a state opened ``read_only`` (by :func:`preload`) its key's writer.

    Call it once the old writer commits no more. The rows committed since the load are
    read in one transaction and replayed, with the newest remembered requests; then the
    state takes writes, each checked by ``before_commit`` (``lock``, ``setup``, ``writer``: see
    :meth:`~crdt_state.postgres.PostgresStore.take_writes`).

    Returns:
        How many stored changes were replayed.

    Raises:
        StorageError: ``"reload"`` (rows it needs were folded into a newer snapshot) or
            any failure: the state is read-only or damaged; close it, open the key afresh.
    """
    store = _store(state)
    newer = store.take_writes(before_commit, lock=lock, setup=setup, writer=writer)
    core = state._core
    _durable.extend(core, newer.changes, newer.requests, store.where)
    if core.doc.client_id in core.log.head_token:  # its fresh id was taken since the load
        raise StorageError(
            "the state's client id wrote to the store since it was loaded: open it afresh",
            details={"database": store.where, "reason": "reload"},
        )
    with core.lock:
        core.read_only = False
    return len(newer.changes)


def _store(state: SharedState) -> PostgresStore:
    store = state._core.store
    if not isinstance(store, PostgresStore):
        raise TypeError("needs a state opened by crdt_state.takeover.preload()")
    return store
