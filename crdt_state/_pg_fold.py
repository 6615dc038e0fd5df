"""A shared writer's round as **one** statement: the hooks' check and every table's rows.

A round sent the usual way (:func:`crdt_state._pg_round.store_round`) is a transaction
of several statements: ``BEGIN``, the hooks' check, one statement per table, ``COMMIT``;
pipelined, still several messages each way and the client's pipeline bookkeeping, about
twice the client CPU of one statement (a round of 9 merges on the benchmark machine,
writer-thread CPU: ~700-1,000 µs so, ~420-480 µs folded). :func:`folded` writes the same
round as one statement, which an autocommit connection runs as one transaction::

    WITH _c AS (<the check's locks>),                  -- rows that passed, locked
         _ok AS (SELECT count(*) = <expected> AS yes FROM _c),
         _w AS (<the check's writes, only if _ok.yes>),
         _s0 AS (INSERT ... FROM _ok, unnest(...) ... WHERE _ok.yes ...),
         ...
    SELECT yes FROM _ok

Contract:

- **All or nothing, decided inside the statement**: the rows are written only when every
  check passed (``yes``); otherwise nothing is (the locks end with the statement), and
  the caller runs the round the usual way, whose check tells each batch its error.
- Only rounds whose every statement has an ``unnest`` form
  (:func:`crdt_state._pg_unnest.gated`), each text once, are folded (``None``
  otherwise): two parts of one statement cannot see each other's rows, so an upsert
  must not meet its own key twice, and an ``INSERT`` of a table must not be split.
  The parts write different tables, so their order within the statement does not
  matter; each part keeps its rows' order.
- A check folds only if it can say what it checks as SQL (:class:`FoldableCheck`);
  rounds with hooks and a check that cannot are not folded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import psycopg

from ._pg_unnest import gated

__all__ = ["FoldableCheck", "FoldedCheck", "Hook", "folded"]

Hook = Callable[["psycopg.Connection[Any]", int], None]
"""A store's ``before_commit(conn, last_ticket)``."""


class FoldedCheck(NamedTuple):
    """What a check of a round's hooks is, as parts of one statement."""

    locks: str
    """A ``SELECT ... FOR UPDATE`` returning one row per check that passed (locked)."""
    lock_params: Sequence[Any]
    expected: int
    """Rows :attr:`locks` returns when every check passed."""
    writes: str | None
    """A data-modifying statement to run only when all passed: it must require ``_ok.yes``
    (a one-row relation ``_ok`` is in scope); ``None``: none."""
    write_params: Sequence[Any] = ()


@runtime_checkable
class FoldableCheck(Protocol):
    """A round's check (``check(conn, hooks)``) that can also be folded into the round."""

    def __call__(
        self, conn: psycopg.Connection[Any], hooks: Sequence[tuple[Hook, int]]
    ) -> Sequence[BaseException | None]:
        """Check ``hooks`` inside the round's transaction (per hook, its error or ``None``)."""
        ...

    def fold(self, hooks: Sequence[tuple[Hook, int]]) -> FoldedCheck | None:
        """The check of ``hooks`` as statement parts (``None``: it cannot be folded)."""
        ...


def folded(
    statements: Sequence[tuple[str, Sequence[Sequence[Any]]]], check: FoldedCheck | None
) -> tuple[str, list[Any]] | None:
    """``statements`` (merged: one text, its rows) and ``check`` as one statement.

    Returns the statement and its parameters, or ``None`` when the round cannot be folded
    (see the module doc). Run it on an autocommit connection; it returns one row whose one
    column says whether the rows were written.
    """
    texts = [sql for sql, _ in statements]
    if len(set(texts)) != len(texts):
        return None
    parts: list[str] = []
    params: list[Any] = []
    if check is None:
        parts.append("_ok AS (SELECT true AS yes)")
    else:
        parts.append(f"_c AS ({check.locks})")
        params.extend(check.lock_params)
        parts.append("_ok AS (SELECT count(*) = %s AS yes FROM _c)")
        params.append(check.expected)
        if check.writes is not None:
            parts.append(f"_w AS ({check.writes})")
            params.extend(check.write_params)
    for i, (sql, rows) in enumerate(statements):
        form = gated(sql, rows)
        if form is None:
            return None
        parts.append(f"_s{i} AS ({form[0]})")
        params.extend(form[1])
    return "WITH " + ", ".join(parts) + " SELECT yes FROM _ok", params
