"""What the PostgreSQL store's writer stores: one batch of queued items, in order.

The items are those of the SQLite store (:mod:`crdt_state._queued_items`);
:func:`write_batch` stores them with the row helpers of :mod:`crdt_state._pg_log`
inside the caller's transaction; the caller commits (after its ``before_commit`` hook).
:func:`stage_batch` records them instead, as a part of a shared writer's round.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from functools import partial
from typing import Any, cast

import psycopg

from . import _pg_log as pglog
from ._pg_connect import failures
from ._pg_shared import Hook, Part, Recorded
from ._queued_items import Item, RowWriter, Written, walk_batch
from .errors import StorageError

__all__ = ["stage_batch", "write_batch"]


def stage_batch(
    key: str,
    batch: Sequence[tuple[int, Item]],
    at: tuple[int, int],
    hook: Hook | None,
    where: str,
) -> Generator[Part, BaseException | None, Written]:
    """Yield ``batch`` as a part of a round (:class:`~crdt_state._pg_shared.SharedWriter`).

    Args:
        key: the state's key.
        batch: the queued ``(ticket, item)``, oldest first.
        at: ``(last_seq, log_rows)`` now (see :func:`write_batch`).
        hook: the store's ``before_commit``.
        where: the store, for messages.

    Returns:
        Where the key stands, once it is sent ``None`` (the round committed).

    Raises:
        StorageError: it is sent the round's error (a psycopg error becomes one), or as
            :func:`write_batch`.
    """
    recorded = Recorded()  # stands for the connection: records, sends nothing
    items = [item for _, item in batch]
    written = write_batch(cast(Any, recorded), key, items, at[0], at[1], where)
    with failures("writing to PostgreSQL failed", where):
        error = yield Part(recorded, hook, batch[-1][0], where, key)
        if error is not None:
            raise error
    return written


def write_batch(
    conn: psycopg.Connection[Any],
    key: str,
    items: Sequence[Item],
    last_seq: int,
    log_rows: int,
    where: str,
) -> Written:
    """Store ``items`` in order, inside the caller's transaction.

    Args:
        conn: the writer's connection, inside the caller's transaction.
        key: the state's key.
        items: the queued items, oldest first.
        last_seq: the seq of the newest stored change; changes must follow it.
        log_rows: the log rows stored now (an epoch drops them all).
        where: the database, for messages.

    Returns:
        Where the key stands once the caller's transaction commits.

    Raises:
        StorageError: a change does not follow the stored log (nothing is kept:
            the caller's transaction rolls back).
    """
    out = RowWriter(
        partial(pglog.append_changes, conn, key),
        partial(pglog.append_conflicts, conn, key),
        partial(pglog.remember_request, conn, key),
        partial(pglog.restart_at, conn, key),
    )

    def out_of_order(last_seq: int, seq: int) -> StorageError:
        return StorageError(
            "the state and its stored log disagree on the change sequence",
            details={"database": where, "expected": last_seq + 1, "got": seq},
        )

    return walk_batch(out, items, last_seq, log_rows, out_of_order)
