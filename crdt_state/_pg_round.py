"""One round of a shared PostgreSQL writer: the batches of many stores in one transaction.

:func:`store_round` stores the :class:`Part` (one batch of recorded statements, its
``before_commit`` hook) of every store of a round:

1. **The fast path**: where the round can be one statement (:mod:`crdt_state._pg_fold`:
   the hooks' check and every table's rows, written only if every check passed), that
   statement alone. Else (or a check failed), one transaction in one pipeline: the
   hooks (see :func:`checked`), then the statements of the batches that passed, the
   same statement of every batch sent as one statement (:func:`merged`; the change log,
   blame, audit and request rows of all batches as one ``INSERT ... SELECT FROM
   unnest(...)`` each, :func:`~crdt_state._pg_unnest.unnested`; any other statement as
   one ``executemany``), then one ``COMMIT``. When nothing fails, that is all a round
   costs.
2. **A statement refused** (the connection still up, back outside any transaction: a
   constraint violated, a value the server or the client's adapter refuses, a row too
   large, a lock timeout...): the fast path's transaction rolled back, so nothing of it is
   stored. The round runs **once more**, in one transaction: the hooks again (a fence
   checked again: one moved meanwhile refuses its batch; what a hook wrote on the first
   try was rolled back with it, so a hook runs twice), then each batch that passed in
   a savepoint of its own, its statements in order in one pipeline. A batch whose
   statement is refused again is rolled back to its savepoint and fails alone with
   :func:`rejected` (``details["reason"] == "rejected"``); the others commit together.
   A batch refused on the fast path that goes through on the retry (a lock timeout, a
   deadlock) is simply stored. Each batch still writes only its own key's rows, so
   storing the others without it changes nothing of theirs.
3. **The connection lost** (on either path, or the retry's ``COMMIT`` refused): every
   batch not failed yet fails with that error; nothing is retried. A ``COMMIT`` whose
   answer was lost may have committed, and its batches cannot be told apart from new
   ones (a second write of a log row would be refused as a duplicate, but conflict
   audit rows would be stored twice and the stores would be told of a failure for rows
   that are stored): the stores fail, and whoever reopens a key loads what the database
   holds. The writer connects again for its next round.

A batch is never reported stored before the ``COMMIT`` that holds it returned; its error
is set on its part (``None``: stored).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from ._pg_connect import hook_refused
from ._pg_fold import FoldableCheck, Hook, folded
from ._pg_unnest import unnested
from .errors import StorageError

__all__ = ["CheckHooks", "Hook", "Part", "Recorded", "merged", "rejected", "store_round"]

log = logging.getLogger("crdt_state.storage")

CheckHooks = Callable[
    ["psycopg.Connection[Any]", Sequence[tuple[Hook, int]]], Sequence[BaseException | None]
]
"""``check(conn, [(hook, last_ticket), ...])``: runs those hooks' checks together inside
the round's transaction; per hook, ``None`` (passed) or the error it would have raised."""


class Recorded:
    """The statements of one batch, recorded in order instead of sent.

    Stands for a connection where the row writers of :mod:`crdt_state._pg_log` expect
    one: ``execute(sql, params)`` and ``cursor().executemany(sql, rows)`` (they read
    nothing back while writing).
    """

    def __init__(self) -> None:
        self.statements: list[tuple[str, list[Any]]] = []

    def execute(self, sql: str, params: Any = None) -> None:
        """Record one execution of ``sql``."""
        self.statements.append((sql, [params]))

    def executemany(self, sql: str, rows: Sequence[Any]) -> None:
        """Record ``sql`` for each of ``rows``."""
        if rows:
            self.statements.append((sql, list(rows)))

    def cursor(self) -> Recorded:
        """Itself (``conn.cursor().executemany(...)``)."""
        return self


class Part:
    """One batch in a round: its statements and hook, then its error (``None``: stored).

    ``key`` is the store's key (``None`` for a batch that is no store's), ``where`` the
    store for messages.
    """

    __slots__ = ("done", "error", "hook", "key", "statements", "ticket", "where")
    done: bool

    def __init__(
        self,
        statements: Recorded,
        hook: Hook | None,
        ticket: int,
        where: str,
        key: str | None = None,
    ) -> None:
        self.statements = statements.statements
        self.hook = hook
        self.ticket = ticket
        self.where = where
        self.key = key
        self.error: BaseException | None = None
        self.done = False


def store_round(
    connected: Callable[[], psycopg.Connection[Any]],
    parts: list[Part],
    check: CheckHooks | None,
) -> bool:
    """Store ``parts`` (see the module doc); each that fails gets its error.

    Args:
        connected: the writer's connection (opened again when it was lost; may raise).
        parts: the round's batches; a part whose ``error`` is set already is left alone.
        check: runs the hooks together (see :data:`CheckHooks`); ``None``: each alone.

    Returns:
        Whether the round ran again, each batch on its own (a statement was refused).
    """
    conn: psycopg.Connection[Any] | None = None
    try:
        conn = connected()
        if _stored_folded(conn, parts, check):
            return False
        with conn.pipeline(), conn.transaction():
            passed = checked(conn, parts, check)
            for sql, rows in merged([part.statements for part in passed]):
                one = unnested(sql, rows)
                if one is not None:  # the rows of every batch in one statement
                    conn.execute(one[0], one[1])
                else:
                    conn.cursor().executemany(sql, rows)
        return False
    except BaseException as exc:
        if conn is None or _lost(conn, exc, TransactionStatus.IDLE):
            _fail(parts, exc)
            _drop_unsure(conn)
            return False
        log.warning(
            "a round of %d batches was refused (%s); storing each batch on its own",
            len(parts),
            _first_line(exc),
        )
    _one_by_one(conn, parts, check)
    return True


def _stored_folded(
    conn: psycopg.Connection[Any], parts: list[Part], check: CheckHooks | None
) -> bool:
    """The round as one statement (:mod:`crdt_state._pg_fold`); whether it stored it.

    ``False`` (nothing written) when the round cannot be folded or a check failed: the
    caller runs it the usual way. Raises what the statement raised.
    """
    if not conn.autocommit:  # one statement is one transaction only in autocommit
        return False
    todo = [part for part in parts if part.error is None]
    hooks = [(part.hook, part.ticket) for part in todo if part.hook is not None]
    folded_check = None
    if hooks:
        if not isinstance(check, FoldableCheck):
            return False
        folded_check = check.fold(hooks)
        if folded_check is None:
            return False
    one = folded(merged([part.statements for part in todo]), folded_check)
    if one is None:
        return False
    row = conn.execute(one[0], one[1]).fetchone()
    return row is not None and bool(row[0])


def _one_by_one(conn: psycopg.Connection[Any], parts: list[Part], check: CheckHooks | None) -> None:
    """The retry: the hooks, then each batch that passed in a savepoint, one ``COMMIT``."""
    todo = [part for part in parts if part.error is None]
    try:
        with conn.transaction():
            for part in checked(conn, todo, check):
                try:
                    with conn.transaction(), conn.pipeline():  # a savepoint: this batch alone
                        for sql, rows in part.statements:
                            conn.cursor().executemany(sql, rows)
                except Exception as exc:
                    if _lost(conn, exc, TransactionStatus.INTRANS):
                        raise
                    part.error = rejected(exc, part)
    except BaseException as exc:  # lost, or the COMMIT refused: nothing of it is stored
        _fail(todo, exc)
        _drop_unsure(conn)


def _drop_unsure(conn: psycopg.Connection[Any] | None) -> None:
    """Close ``conn`` unless it is idle outside a transaction (the next round reconnects)."""
    if conn is not None and conn.info.transaction_status != TransactionStatus.IDLE:
        conn.close()


def _lost(conn: psycopg.Connection[Any], exc: BaseException, status: TransactionStatus) -> bool:
    """Whether ``exc`` is more than a refusal: an interrupt, the connection gone or unsure."""
    return (
        not isinstance(exc, Exception)
        or conn.closed
        or conn.broken
        or conn.info.transaction_status != status
    )


def _fail(parts: Sequence[Part], exc: BaseException) -> None:
    for part in parts:
        if part.error is None:
            part.error = exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def rejected(exc: BaseException, part: Part) -> StorageError:
    """The :class:`StorageError` of a batch whose own statement was refused with ``exc``.

    ``details``: ``"reason"`` ``"rejected"``, ``"database"`` (the store), ``"key"`` (the
    store's key, when it has one) and ``"sqlstate"`` (the server's error code; ``None``
    when the client refused a value before sending it); ``__cause__`` is ``exc``.
    """
    sqlstate = exc.sqlstate if isinstance(exc, psycopg.Error) else None
    details: dict[str, Any] = {"database": part.where, "reason": "rejected", "sqlstate": sqlstate}
    if part.key is not None:
        details["key"] = part.key
    error = StorageError(
        f"PostgreSQL refused a statement of this batch (the round's other batches were"
        f" stored): {_first_line(exc)}",
        details=details,
    )
    error.__cause__ = exc
    return error


def checked(
    conn: psycopg.Connection[Any], parts: list[Part], check: CheckHooks | None
) -> list[Part]:
    """Run the hooks of ``parts``; the parts that passed (the others have their error).

    With ``check``, all in one call; else each hook in its own savepoint (a failed
    statement fails it alone). A lost connection, or ``check`` raising, raises.
    """
    hooked = [part for part in parts if part.hook is not None]
    if check is not None and hooked:
        errors = check(conn, [(part.hook, part.ticket) for part in hooked])  # type: ignore[misc]
        for part, error in zip(hooked, errors, strict=True):
            if error is not None:
                part.error = hook_refused(error, part.where)
    else:
        for part in hooked:
            assert part.hook is not None
            try:
                with conn.transaction():  # a savepoint: a failed statement fails it alone
                    part.hook(conn, part.ticket)
            except Exception as exc:
                if conn.broken or isinstance(exc, psycopg.OperationalError):
                    raise  # the connection failed: the whole round does
                part.error = hook_refused(exc, part.where)
    return [part for part in parts if part.error is None]


def merged(batches: Sequence[Sequence[tuple[str, list[Any]]]]) -> list[tuple[str, list[Any]]]:
    """The statements of ``batches`` as few ``executemany`` calls, each batch's order kept.

    Repeatedly takes the statement at the front of the first batch that has one left, and
    from every batch the leading statements of that same text: batches of the same shape
    (a log insert, a blame upsert, ...) become one call per statement. Batches write
    disjoint rows (each its own key), so only each batch's own order matters.
    """
    fronts = [0] * len(batches)
    out: list[tuple[str, list[Any]]] = []
    while True:
        sql = next(
            (b[f][0] for b, f in zip(batches, fronts, strict=True) if f < len(b)),
            None,
        )
        if sql is None:
            return out
        rows: list[Any] = []
        for i, batch in enumerate(batches):
            front = fronts[i]
            while front < len(batch) and batch[front][0] == sql:
                rows.extend(batch[front][1])
                front += 1
            fronts[i] = front
        out.append((sql, rows))
