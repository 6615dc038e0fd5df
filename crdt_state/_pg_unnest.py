"""A round's rows of one table as **one** statement: ``INSERT ... SELECT FROM unnest(...)``.

The row writers of :mod:`crdt_state._pg_log` record one-row statements (``VALUES (%s,
...)``, run with ``executemany``). A shared writer's round merges the rows of every batch
per statement (:func:`crdt_state._pg_round.merged`); sent with ``executemany`` that is
still one server execution per row, each parsed, bound and executed, and each row's
parameters packed by the client as a message of their own. :func:`unnested` gives the same
rows as one statement with one array parameter per column, which PostgreSQL expands with
``unnest``: one execution per table per round.

Contract (the same rows stored as by ``executemany``):

- rows are inserted in their order (``WITH ORDINALITY ... ORDER BY``): the audit log's
  identity ids and the remembered requests' ``n`` follow it as they did;
- an upsert names each conflict key once per statement (PostgreSQL refuses a row
  affected twice by one ``ON CONFLICT DO UPDATE``), so of several rows of one key only
  the **last** is kept, at its place: what a series of upserts would have left;
- a statement without a form here (a snapshot, a delete), or fewer than
  :data:`MIN_ROWS` rows, is left as it is (``None``).

A refused row refuses the whole statement, as with ``executemany`` in one transaction:
the round's fallback (each batch in a savepoint, with the recorded one-row statements)
is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from . import _pg_log as pglog
from ._sql_params import LOG_COLUMNS

__all__ = ["MIN_ROWS", "gated", "unnested"]

MIN_ROWS: Final = 8
"""Fewest rows sent as one statement. The arrays' packing (binary, ``%b``) costs the
client more than ``executemany`` saves below that: writer-thread CPU per merge of a round
of one-merge batches (log, blame and request rows each), ``executemany`` / ``unnest``,
alternated in one process: 2 batches 474 / 625 µs, 6: 218 / 224, 8: 193 / 182, 12: 155 /
133, 16: 119 / 93, 32: 108 / 65."""


class _Form(NamedTuple):
    sql: str
    """The statement, one ``%s`` array parameter per column."""
    gated: str
    """The same, inserting nothing unless ``_ok.yes`` (see :func:`gated`)."""
    width: int
    """Columns per row."""
    unique: int
    """Leading columns forming the upsert's conflict key (0: a plain insert)."""


def _form(table: str, columns: str, types: str, tail: str = "", unique: int = 0) -> _Form:
    names = [c.strip() for c in columns.split(",")]
    kinds = [t.strip() for t in types.split(",")]
    assert len(names) == len(kinds)
    arrays = ", ".join(f"%b::{kind}[]" for kind in kinds)
    head = f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(names)} FROM"
    rows = f"unnest({arrays}) WITH ORDINALITY AS u({', '.join(names)}, ord_)"
    sql = f"{head} {rows} ORDER BY ord_{tail}"
    gated = f"{head} _ok, {rows} WHERE _ok.yes ORDER BY ord_{tail}"
    return _Form(sql, gated, len(names), unique)


def _tail(sql: str) -> str:
    """What follows the ``VALUES (...)`` of a one-row statement (its ``ON CONFLICT``)."""
    return sql[sql.index(")", sql.index("VALUES")) + 1 :]


_FORMS: Final = {
    pglog.INSERT_LOG: _form(
        "crdt_store_log",
        f"key, {LOG_COLUMNS}",
        "text, int8, bytea, bytea, text, text, float8, text",
    ),
    pglog.UPSERT_BLAME: _form(
        "crdt_store_blame",
        "key, path, seq, agent, time, token",
        "text, text, int8, text, float8, bytea",
        _tail(pglog.UPSERT_BLAME),
        unique=2,
    ),
    pglog.UPSERT_REQUEST: _form(
        "crdt_store_requests",
        "key, writer, id, seq, token, paths, clean",
        "text, text, int8, int8, bytea, text, bool",
        _tail(pglog.UPSERT_REQUEST),
        unique=3,
    ),
    pglog.INSERT_CONFLICTS: _form(
        "crdt_store_conflicts",
        "key, time, path, base, current, incoming, current_agent, incoming_agent, policy,"
        " resolution, applied, token",
        "text, float8, text, text, text, text, text, text, text, text, bool, bytea",
    ),
}


def unnested(sql: str, rows: Sequence[Sequence[Any]]) -> tuple[str, list[list[Any]]] | None:
    """``rows`` of the one-row statement ``sql`` as one statement and its column arrays.

    ``None`` when ``sql`` has no such form or there are fewer than :data:`MIN_ROWS` rows
    (send them as they are).
    """
    form = _FORMS.get(sql)
    if form is None or len(rows) < MIN_ROWS:
        return None
    return form.sql, _columns(form, rows)


def gated(sql: str, rows: Sequence[Sequence[Any]]) -> tuple[str, list[list[Any]]] | None:
    """As :func:`unnested`, for any number of rows, the rows inserted only where ``_ok.yes``.

    For a statement that is one part of a larger one (:mod:`crdt_state._pg_fold`), which
    defines ``_ok``: a one-row relation whose boolean ``yes`` says whether to write.
    ``None`` when ``sql`` has no such form.
    """
    form = _FORMS.get(sql)
    if form is None or not rows:
        return None
    return form.gated, _columns(form, rows)


def _columns(form: _Form, rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The column arrays of ``rows`` (of an upsert's rows, only each key's last)."""
    if form.unique and len({tuple(row[: form.unique]) for row in rows}) < len(rows):
        rows = _last_kept(rows, form.unique)
    columns: list[list[Any]] = [[] for _ in range(form.width)]
    for row in rows:
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    return columns


def _last_kept(rows: Sequence[Sequence[Any]], unique: int) -> list[Sequence[Any]]:
    """``rows`` without those a later row of the same conflict key replaces, order kept."""
    seen: set[tuple[Any, ...]] = set()
    kept: list[Sequence[Any]] = []
    for row in reversed(rows):
        key = tuple(row[:unique])
        if key not in seen:
            seen.add(key)
            kept.append(row)
    kept.reverse()
    return kept
