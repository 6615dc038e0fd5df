"""What the PostgreSQL store's writer thread stores: one batch of queued items, in order.

The items are those of the SQLite store (:mod:`crdt_state._queued_items`);
:func:`write_batch` stores them with the row helpers of :mod:`crdt_state._pg_log`
inside the caller's transaction; the caller commits (after its ``before_commit`` hook).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import psycopg

from . import _pg_log as pglog
from ._queued_items import Item, RowWriter, Written, walk_batch
from .errors import StorageError

__all__ = ["write_batch"]


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
