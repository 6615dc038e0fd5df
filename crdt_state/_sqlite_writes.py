"""The write path of the SQLite store: one batch of queued items in one transaction.

:class:`~crdt_state.storage.SqliteStore` queues items (:mod:`crdt_state._queued_items`)
under the state's lock and its writer thread
(:class:`~crdt_state._group_commit.GroupCommit`) hands them over here a batch at a
time; :func:`write_batch` stores them, in their order, with the row helpers of
:mod:`crdt_state._sqlite_log`. The read path is :mod:`crdt_state._sqlite_reads`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import partial
from typing import cast

from . import _sqlite_batch as sqlbatch
from . import _sqlite_file as sqlfile
from . import _sqlite_log as sqllog
from ._queued_items import Item, RowWriter, Written, walk_batch
from .conflicts import StateUpdate
from .errors import StorageError

__all__ = ["write_batch"]


def write_batch(
    conn: sqlite3.Connection,
    items: Sequence[Item],
    last_seq: int,
    log_rows: int,
    file: str,
    *,
    at_once: bool = False,
) -> Written:
    """Store ``items`` in one transaction, in their order.

    Args:
        conn: the store's connection (the caller holds its lock).
        items: the batch, oldest first.
        last_seq: the seq of the newest change already stored.
        log_rows: how many change rows the log holds now.
        file: the file's name, for errors.
        at_once: the connection has its batch view
            (:func:`~crdt_state._sqlite_batch.prepare_batch_rows`): a batch of
            consecutive changes without conflicts, and few enough rows, is stored
            in one statement (:func:`~crdt_state._sqlite_batch.append_changes_at_once`),
            the same rows as otherwise.

    Returns:
        Where the file stands once the transaction is committed.

    Raises:
        StorageError: a change or epoch out of sequence (nothing of the batch is stored).
        sqlite3.Error: the database refused the write (nothing of the batch is stored).
    """
    if at_once and _plain_changes(items, last_seq) and not conn.in_transaction:
        changes = cast("Sequence[StateUpdate]", items)
        if sqlbatch.append_changes_at_once(conn, changes):
            return Written(changes[-1].seq, log_rows + len(changes), 0)
    out = RowWriter(
        partial(sqllog.append_changes, conn),
        partial(sqllog.append_conflicts, conn),
        partial(sqllog.remember_request, conn),
        partial(sqllog.restart_at, conn),
    )

    def out_of_order(last_seq: int, seq: int) -> StorageError:
        return StorageError(
            "the state and its file disagree on the change sequence",
            details={"file": file, "expected": last_seq + 1, "got": seq},
        )

    with sqlfile.transaction(conn):
        written = walk_batch(out, items, last_seq, log_rows, out_of_order)
    if written.epochs:
        sqllog.release_free_pages(conn)
    return written


def _plain_changes(items: Sequence[Item], last_seq: int) -> bool:
    """True for a batch of changes without conflicts, numbered ``last_seq + 1`` on."""
    for n, item in enumerate(items, last_seq + 1):
        if not isinstance(item, StateUpdate) or item.seq != n or item.conflicts:
            return False
    return bool(items)
