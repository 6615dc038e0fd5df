"""A shared writer's round sends each table's rows as one ``unnest`` statement.

Real PostgreSQL (a throwaway database). The statements of the batches of one round go in
as one ``INSERT ... SELECT FROM unnest(...)`` per table (``crdt_state._pg_unnest``): the
rows stored are those one-row statements would have stored (order of identity ids and
request numbers kept, an upsert's last row of a key winning), and a batch refused inside
such a statement still fails alone.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any, cast

import psycopg
import pytest
from writer_rounds import durability_told, in_one_round

from crdt_state import SharedState, StorageError, _pg_fold, _pg_round, _pg_unnest
from crdt_state import _pg_log as pglog
from crdt_state._pg_unnest import MIN_ROWS, gated, unnested
from crdt_state.postgres import Recorded, SharedWriter, load_stored, open_postgres

GATE = 0x7E57_0003
"""The advisory lock a test holds to keep the writer busy in a round."""


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The tables' one-statement sends of the rounds: ``(sql, rows)`` each.

    Either form: a part of a round folded into one statement (``_pg_fold``), or a
    statement of its own, from two rows on (the writer's threshold is a cost, not a
    rule), so that small rounds exercise the form.
    """
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr(_pg_unnest, "MIN_ROWS", 2)

    def spying(form: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
        def spy(sql: str, rows: Any) -> tuple[str, list[list[Any]]] | None:
            one = cast("tuple[str, list[list[Any]]] | None", form(sql, rows))
            if one is not None:
                sent.append((sql, len(one[1][0])))
            return one

        return spy

    monkeypatch.setattr(_pg_round, "unnested", spying(unnested))
    monkeypatch.setattr(_pg_fold, "gated", spying(gated))
    return sent


def _rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def test_few_rows_and_unknown_statements_are_left_alone() -> None:
    rows = [("k", f"p{n}", n, "a", 0.0, b"t") for n in range(MIN_ROWS)]
    assert unnested(pglog.UPSERT_BLAME, rows[1:]) is None
    assert unnested(pglog.UPSERT_BLAME, rows) is not None
    keys = [(f"k{n}",) for n in range(MIN_ROWS)]
    assert unnested("DELETE FROM crdt_store_log WHERE key = %s", keys) is None


def test_a_round_of_many_rows_uses_the_form_without_help() -> None:
    rows = [("k", n, b"", b"", None, "o", 0.0, "[]") for n in range(MIN_ROWS)]
    one = unnested(pglog.INSERT_LOG, rows)
    assert one is not None and one[1][1] == list(range(MIN_ROWS))


def test_an_upsert_keeps_the_last_row_of_a_key_at_its_place(
    statements: list[tuple[str, int]],
) -> None:
    rows = [
        ("k", "/a", 1, "x", 1.0, b"1"),
        ("k", "/b", 2, "x", 2.0, b"2"),
        ("k", "/a", 3, "y", 3.0, b"3"),  # replaces the first
        ("j", "/a", 4, None, 4.0, b"4"),  # another key: kept
    ]
    one = unnested(pglog.UPSERT_BLAME, rows)
    assert one is not None
    sql, columns = one
    assert "unnest(" in sql and "ON CONFLICT (key, path)" in sql
    assert columns[2] == [2, 3, 4]  # seqs, in the order of the rows kept
    assert columns[3] == ["x", "y", None]
    plain = unnested(pglog.INSERT_LOG, [("k", 1, b"", b"", None, "o", 0.0, "[]")] * 2)
    assert plain is not None and len(plain[1][0]) == 2  # an insert keeps every row


def test_a_round_stores_each_table_in_one_statement(
    throwaway_postgres: str, statements: list[tuple[str, int]]
) -> None:
    dsn = throwaway_postgres
    writer = SharedWriter(dsn)
    prefix = f"unnest-{secrets.token_hex(4)}"
    states = [open_postgres(dsn, f"{prefix}-{n}", writer=writer) for n in range(3)]
    try:
        for n, state in enumerate(states):
            state.commit({"n": n, "same": 0}, state.token, "first")
        statements.clear()

        def edit(state: SharedState, n: int) -> Callable[[], None]:
            def two() -> None:  # two changes of one store in the batch, the same path twice
                state.commit({"same": n}, state.token, "second", wait=False)
                state.commit({"same": n + 10}, state.token, "third", wait=False)

            return two

        in_one_round(writer, dsn, GATE, [edit(state, n) for n, state in enumerate(states)])
        assert [durability_told(state) for state in states] == [[None]] * 3
        sent = dict(statements)
        assert sent[pglog.INSERT_LOG] == 6  # every change of the round, one statement
        assert sent[pglog.UPSERT_BLAME] == 3  # one row per key and path: the newest
        for n, state in enumerate(states):
            room = f"{prefix}-{n}"
            stored = load_stored(dsn, room)
            assert stored is not None
            assert [c.agent for c in stored.changes] == ["first", "second", "third"]
            blame = _rows(dsn, "SELECT path, agent FROM crdt_store_blame WHERE key = %s", room)
            assert dict(blame)['["same"]'] == "third"
            assert state.read()[0]["same"] == n + 10
    finally:
        for state in states:
            state.close()
        writer.close()


def test_audit_rows_and_requests_keep_their_order(
    throwaway_postgres: str, statements: list[tuple[str, int]]
) -> None:
    dsn = throwaway_postgres
    writer = SharedWriter(dsn)
    keys = [f"unnest-audit-{secrets.token_hex(4)}-{n}" for n in range(2)]
    try:

        def batch(key: str) -> Recorded:
            recorded = Recorded()
            for n in range(3):
                recorded.execute(
                    pglog.INSERT_CONFLICTS,
                    (key, float(n), "p", "b", "c", "i", None, None, None, "r", True, b""),
                )
            for n in range(3):  # one request upserted three times: the last one stays
                pglog.remember_request(cast(Any, recorded), key, "w", 7, n, b"t", True)
            return recorded

        done: list[threading.Thread] = []

        def send(key: str) -> Callable[[], None]:
            def start() -> None:
                thread = threading.Thread(target=writer.commit, args=(batch(key), None, 0, key))
                thread.start()
                done.append(thread)

            return start

        in_one_round(writer, dsn, GATE, [send(key) for key in keys])
        for thread in done:
            thread.join(10)
        sent = dict(statements)
        assert sent[pglog.INSERT_CONFLICTS] == 6  # both batches' audit rows, one statement
        assert sent[pglog.UPSERT_REQUEST] == 2  # one row per key and request
        for key in keys:
            times = _rows(
                dsn, "SELECT time FROM crdt_store_conflicts WHERE key = %s ORDER BY id", key
            )
            assert [t for (t,) in times] == [0.0, 1.0, 2.0]  # ids follow the rows' order
            requests = _rows(dsn, "SELECT seq FROM crdt_store_requests WHERE key = %s", key)
            assert requests == [(2,)]  # the last upsert of the request won
    finally:
        writer.close()


@pytest.mark.parametrize("bad", [0, 2])
def test_a_batch_refused_inside_a_statement_fails_alone(
    throwaway_postgres: str, statements: list[tuple[str, int]], bad: int
) -> None:
    dsn = throwaway_postgres
    writer = SharedWriter(dsn)
    prefix = f"unnest-bad-{secrets.token_hex(4)}"
    rooms = [f"{prefix}-{n}" for n in range(3)]
    states = [open_postgres(dsn, room, writer=writer) for room in rooms]
    try:
        for state in states:
            state.commit({"n": 0}, state.token, "first")
        with psycopg.connect(dsn, autocommit=True) as conn:  # the culprit's next row, taken
            conn.execute(
                "INSERT INTO crdt_store_log (key, seq, token, doc_update, agent, origin, time,"
                " paths) SELECT key, max(seq) + 1, '', '', 'intruder', 'test', 0, '[]'"
                " FROM crdt_store_log WHERE key = %s GROUP BY key",
                (rooms[bad],),
            )
        statements.clear()
        retries = writer.retries
        edits = [
            (lambda s=state: s.commit({"n": 1}, s.token, "second", wait=False)) for state in states
        ]
        in_one_round(writer, dsn, GATE, edits)
        told = [durability_told(state) for state in states]
        assert dict(statements)[pglog.INSERT_LOG] == 3  # the culprit's row was in it
        assert writer.retries == retries + 1
        for n, room in enumerate(rooms):
            agents = [
                r[0]
                for r in _rows(
                    dsn, "SELECT agent FROM crdt_store_log WHERE key = %s ORDER BY seq", room
                )
            ]
            if n == bad:
                error = told[n][0]
                assert isinstance(error, StorageError)
                assert error.details["reason"] == "rejected"
                assert error.details["key"] == room
                assert agents == ["first", "intruder"]
            else:
                assert told[n] == [None]
                assert agents == ["first", "second"]
    finally:
        for state in states:
            state.close()
        writer.close()
