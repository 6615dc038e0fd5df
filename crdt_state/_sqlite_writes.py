"""The write path of the SQLite store: one batch of queued items in one transaction.

:class:`~crdt_state.storage.SqliteStore` queues items under the state's lock and its
writer thread (:class:`~crdt_state._group_commit.GroupCommit`) hands them over here a
batch at a time; :func:`write_batch` stores them, in their order, with the row
helpers of :mod:`crdt_state._sqlite_log`. The read path is
:mod:`crdt_state._sqlite_reads`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from . import _sqlite_file as sqlfile
from . import _sqlite_log as sqllog
from .conflicts import Conflict, StateUpdate
from .errors import StorageError
from .journal import EpochStart
from .requests import RequestKey
from .version import VersionVector

__all__ = ["Audit", "Item", "RememberedRequest", "Written", "write_batch"]


@dataclass(frozen=True, slots=True)
class Audit:
    """The conflicts of a merge that wrote nothing, for the audit log."""

    conflicts: tuple[Conflict, ...]
    token: VersionVector
    time: float


@dataclass(frozen=True, slots=True)
class RememberedRequest:
    """An applied request that wrote nothing (no change row carries it)."""

    key: RequestKey
    token: VersionVector
    seq: int
    clean: bool


Item = StateUpdate | EpochStart | Audit | RememberedRequest
"""What a store queues: a change, a new epoch, an audit, a remembered request."""


@dataclass(frozen=True, slots=True)
class Written:
    """Where the file stands after a batch."""

    last_seq: int
    """The seq of the newest change (or epoch) stored."""
    log_rows: int
    """How many change rows the log holds."""
    epochs: int
    """How many new epochs the batch started."""


def write_batch(
    conn: sqlite3.Connection,
    items: Sequence[Item],
    last_seq: int,
    log_rows: int,
    file: str,
) -> Written:
    """Store ``items`` in one transaction, in their order.

    Args:
        conn: the store's connection (the caller holds its lock).
        items: the batch, oldest first.
        last_seq: the seq of the newest change already stored.
        log_rows: how many change rows the log holds now.
        file: the file's name, for errors.

    Returns:
        Where the file stands once the transaction is committed.

    Raises:
        StorageError: a change or epoch out of sequence (nothing of the batch is stored).
        sqlite3.Error: the database refused the write (nothing of the batch is stored).
    """
    changes: list[StateUpdate] = []
    epochs = 0
    with sqlfile.transaction(conn):
        for item in items:
            if isinstance(item, StateUpdate):
                if item.seq != last_seq + 1:
                    raise _out_of_order(file, last_seq, item.seq)
                last_seq = item.seq
                changes.append(item)
                log_rows += 1
                continue
            sqllog.append_changes(conn, changes)  # keep the order of the items
            changes = []
            if isinstance(item, Audit):
                applied = all(c.resolved for c in item.conflicts)
                token = item.token.to_state()
                sqllog.append_conflicts(conn, item.conflicts, token, item.time, applied)
            elif isinstance(item, RememberedRequest):
                key = item.key
                token = item.token.to_state()
                sqllog.remember_request(
                    conn, key.writer, key.request_id, item.seq, token, item.clean
                )
            else:  # a new epoch: its document is the whole history
                if item.seq != last_seq + 1:
                    raise _out_of_order(file, last_seq, item.seq)
                last_seq = item.seq
                sqllog.restart_at(conn, item.seq, item.token.to_state(), item.document)
                log_rows = 0
                epochs += 1
        sqllog.append_changes(conn, changes)
    if epochs:
        sqllog.release_free_pages(conn)
    return Written(last_seq, log_rows, epochs)


def _out_of_order(file: str, last_seq: int, seq: int) -> StorageError:
    """The error of an item whose seq does not follow ``last_seq``."""
    return StorageError(
        "the state and its file disagree on the change sequence",
        details={"file": file, "expected": last_seq + 1, "got": seq},
    )
