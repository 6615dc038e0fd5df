"""What the PostgreSQL store's writer thread stores: one batch of queued items, in order.

The items are those of the SQLite store: changes (:class:`StateUpdate`), new epochs
(:class:`EpochStart`), audits of merges that wrote nothing (:class:`Audit`) and requests
that wrote nothing (:class:`Request`). :func:`write_batch` runs inside the caller's
transaction; the caller commits (after its ``before_commit`` hook).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from . import _pg_log as pglog
from .conflicts import Conflict, StateUpdate
from .errors import StorageError
from .journal import EpochStart
from .requests import RequestKey
from .version import VersionVector

__all__ = ["Audit", "Item", "Request", "Written", "write_batch"]


@dataclass(frozen=True, slots=True)
class Audit:
    """Conflicts of a merge that wrote nothing (refused, or kept the current value)."""

    conflicts: tuple[Conflict, ...]
    token: VersionVector
    time: float


@dataclass(frozen=True, slots=True)
class Request:
    """An applied request that wrote nothing (no change row carries it)."""

    key: RequestKey
    token: VersionVector
    seq: int
    clean: bool


Item = StateUpdate | EpochStart | Audit | Request


@dataclass(frozen=True, slots=True)
class Written:
    """What a batch did: the newest change seq, log rows added (an epoch: ``-old rows``)."""

    last_seq: int
    added: int
    epochs: int


def write_batch(
    conn: psycopg.Connection[Any],
    key: str,
    batch: list[tuple[int, Item]],
    last_seq: int,
    log_rows: int,
    where: str,
) -> Written:
    """Store ``batch`` in order, inside the caller's transaction.

    Args:
        last_seq: the seq of the newest stored change; changes must follow it.
        log_rows: the log rows stored now (an epoch drops them all).
        where: the database, for messages.

    Raises:
        StorageError: a change does not follow the stored log (nothing is kept:
            the caller's transaction rolls back).
    """
    added, epochs = 0, 0
    changes: list[StateUpdate] = []

    def follow(seq: int) -> int:
        if seq != last_seq + 1:
            raise StorageError(
                "the state and its stored log disagree on the change sequence",
                details={"database": where, "expected": last_seq + 1, "got": seq},
            )
        return seq

    for _, item in batch:
        if isinstance(item, StateUpdate):
            last_seq = follow(item.seq)
            changes.append(item)
            added += 1
            continue
        pglog.append_changes(conn, key, changes)  # keep the order of the items
        changes = []
        if isinstance(item, Audit):
            applied = all(c.resolved for c in item.conflicts)
            token = item.token.to_state()
            pglog.append_conflicts(conn, key, item.conflicts, token, item.time, applied)
        elif isinstance(item, Request):
            writer, request_id = item.key.writer, item.key.request_id
            token = item.token.to_state()
            pglog.remember_request(conn, key, writer, request_id, item.seq, token, item.clean)
        else:  # a new epoch: its document is the whole history
            last_seq = follow(item.seq)
            pglog.restart_at(conn, key, item.seq, item.token.to_state(), item.document)
            added = -log_rows
            epochs += 1
    pglog.append_changes(conn, key, changes)
    return Written(last_seq, added, epochs)
