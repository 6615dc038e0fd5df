"""What a store queues for its writer thread, and the engine-neutral walk over one batch.

Both stores (:class:`~crdt_state.storage.SqliteStore` and
:class:`~crdt_state.postgres.PostgresStore`) queue the same items: changes
(:class:`StateUpdate`), new epochs (:class:`EpochStart`), audits of merges that
wrote nothing (:class:`Audit`) and requests that wrote nothing
(:class:`RememberedRequest`). :func:`walk_batch` stores a batch in order
through a :class:`RowWriter` (the engine's SQL); the caller owns the
transaction. Knows neither SQL nor threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .conflicts import Conflict, StateUpdate
from .errors import StorageError
from .journal import EpochStart
from .requests import RequestKey
from .version import VersionVector

__all__ = ["Audit", "Item", "RememberedRequest", "RowWriter", "Written", "walk_batch"]


@dataclass(frozen=True, slots=True)
class Audit:
    """The conflicts of a merge that wrote nothing (refused, or kept the current value)."""

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
    """Where the store stands after a batch."""

    last_seq: int
    """The seq of the newest change (or epoch) stored."""
    log_rows: int
    """How many change rows the log holds."""
    epochs: int
    """How many new epochs the batch started."""


@dataclass(frozen=True, slots=True)
class RowWriter:
    """The row writers of one engine, bound to its connection (and key).

    Each runs inside the caller's transaction; the engines' log modules
    (:mod:`crdt_state._sqlite_log`, :mod:`crdt_state._pg_log`) define them.
    """

    append_changes: Callable[[Sequence[StateUpdate]], None]
    """``append_changes(changes)``: changes (oldest first) with blame, request ids, conflicts."""
    append_conflicts: Callable[[Sequence[Conflict], bytes, float, bool], None]
    """``append_conflicts(conflicts, token, when, applied)``: rows of the audit log."""
    remember_request: Callable[[str, int, int, bytes, bool], None]
    """``remember_request(writer, request_id, seq, token, clean)``: a request that wrote nothing."""
    restart_at: Callable[[int, bytes, bytes], None]
    """``restart_at(seq, token, snapshot)``: the snapshot becomes the whole history (an epoch)."""


def walk_batch(
    out: RowWriter,
    items: Iterable[Item],
    last_seq: int,
    log_rows: int,
    out_of_order: Callable[[int, int], StorageError],
) -> Written:
    """Store ``items`` through ``out``, in their order (consecutive changes together).

    Args:
        out: the engine's row writer, inside the caller's transaction.
        items: the batch, oldest first.
        last_seq: the seq of the newest change already stored.
        log_rows: how many change rows the log holds now (an epoch drops them all).
        out_of_order: ``out_of_order(last_seq, seq)``, the error of a change or
            epoch whose seq does not follow ``last_seq``.

    Returns:
        Where the store stands once the caller's transaction commits.

    Raises:
        StorageError: a change or epoch out of sequence (the caller rolls back).
    """
    changes: list[StateUpdate] = []
    epochs = 0
    for item in items:
        if isinstance(item, StateUpdate):
            if item.seq != last_seq + 1:
                raise out_of_order(last_seq, item.seq)
            last_seq = item.seq
            changes.append(item)
            log_rows += 1
            continue
        out.append_changes(changes)  # keep the order of the items
        changes = []
        if isinstance(item, Audit):
            applied = all(c.resolved for c in item.conflicts)
            out.append_conflicts(item.conflicts, item.token.to_state(), item.time, applied)
        elif isinstance(item, RememberedRequest):
            key, token = item.key, item.token.to_state()
            out.remember_request(key.writer, key.request_id, item.seq, token, item.clean)
        else:  # a new epoch: its document is the whole history
            if item.seq != last_seq + 1:
                raise out_of_order(last_seq, item.seq)
            last_seq = item.seq
            out.restart_at(item.seq, item.token.to_state(), item.document)
            log_rows = 0
            epochs += 1
    out.append_changes(changes)
    return Written(last_seq, log_rows, epochs)
