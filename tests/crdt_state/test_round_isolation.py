"""A shared writer's round isolates a batch PostgreSQL refuses: it fails alone.

Real PostgreSQL (a throwaway database). Several stores share a
:class:`~crdt_state.postgres.SharedWriter`; the writer is held busy in a round while each
store hands it a batch, so the batches go in one round. One store's batch is refused for
real: another connection wrote the log row its batch writes next (a unique violation on
the server), or its agent name holds a NUL byte (refused by the client before sending).
The round runs again, each batch on its own: the others are stored and told so, the
culprit fails with ``details["reason"] == "rejected"`` and stays failed. Every subset of
four batches failing leaves exactly the others stored. A lost connection still fails
every batch of its round, with no retry.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from writer_rounds import durability_told, held_writer, in_one_round, until

from crdt_state import SharedState, StorageError
from crdt_state.postgres import Recorded, SharedWriter, load_stored, open_postgres

GATE = 0x7E57_0002
"""The advisory lock a test holds to keep the writer busy in a round."""


def _take_next_row(dsn: str, key: str) -> None:
    """Another writer stores ``key``'s next log row: the store's own next one is refused."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO crdt_store_log (key, seq, token, doc_update, agent, origin, time, paths)"
            " SELECT %(k)s, coalesce(max(seq), (SELECT max(seq) FROM crdt_store_snapshot"
            " WHERE key = %(k)s)) + 1, '', '', 'intruder', 'test', 0, '[]'"
            " FROM crdt_store_log WHERE key = %(k)s",
            {"k": key},
        )


def _agents(dsn: str, key: str) -> list[str | None]:
    """The agents of ``key``'s log rows, in order (the intruder's row does not load)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT agent FROM crdt_store_log WHERE key = %s ORDER BY seq", (key,)
        ).fetchall()
    return [row[0] for row in rows]


def _open(dsn: str, writer: SharedWriter, count: int) -> tuple[list[str], list[SharedState]]:
    prefix = f"iso-{secrets.token_hex(4)}"
    rooms = [f"{prefix}-{n}" for n in range(count)]
    return rooms, [open_postgres(dsn, room, writer=writer) for room in rooms]


@pytest.mark.parametrize("refusal", ["server", "client"])
def test_a_refused_batch_fails_alone_and_stays_failed(
    throwaway_postgres: str, refusal: str
) -> None:
    dsn = throwaway_postgres
    writer = SharedWriter(dsn)
    rooms, states = _open(dsn, writer, 3)
    try:
        for n, state in enumerate(states):
            state.commit({"n": n}, state.token, "first")
        bad = 1
        if refusal == "server":
            _take_next_row(dsn, rooms[bad])
        retries = writer.retries

        def edit(n: int) -> Callable[[], object]:
            agent = "bad\x00agent" if refusal == "client" and n == bad else "second"
            state = states[n]
            return lambda: state.commit({"m": n}, state.token, agent, wait=False)

        in_one_round(writer, dsn, GATE, [edit(n) for n in range(3)])
        told = [durability_told(state) for state in states]
        assert writer.retries == retries + 1
        assert told[0] == [None] and told[2] == [None]  # stored, and told so
        for n in (0, 2):
            assert _agents(dsn, rooms[n]) == ["first", "second"]
        error = told[bad][0]
        assert isinstance(error, StorageError) and error.code == "storage"
        assert error.details["reason"] == "rejected"
        assert error.details["key"] == rooms[bad]
        assert error.details["database"].endswith(f"#{rooms[bad]}")
        if refusal == "server":
            assert isinstance(error.__cause__, psycopg.errors.UniqueViolation)
            assert error.details["sqlstate"] == "23505"
        else:
            assert isinstance(error.__cause__, psycopg.DataError)
            assert error.details["sqlstate"] is None
        expected = ["first", "intruder"] if refusal == "server" else ["first"]
        assert _agents(dsn, rooms[bad]) == expected  # nothing of its batch
        # The culprit's store failed for good: a later write raises, naming the refusal.
        with pytest.raises(StorageError) as later:
            states[bad].commit({"again": 1}, states[bad].token, "third")
        assert later.value.details["reason"] == "rejected"
        assert isinstance(later.value.__cause__, type(error.__cause__))
        for n in (0, 2):  # the others go on
            states[n].commit({"again": n}, states[n].token, "third")
            assert _agents(dsn, rooms[n]) == ["first", "second", "third"]
        assert _agents(dsn, rooms[bad]) == expected
        for n in (0, 2):  # what was stored loads: the batch's rows all went in, in order
            stored = load_stored(dsn, rooms[n])
            assert stored is not None and [c.agent for c in stored.changes] == [
                "first",
                "second",
                "third",
            ]
    finally:
        for state in states:
            state.close()
        writer.close()


@pytest.fixture(scope="module")
def shared(throwaway_postgres: str) -> Iterator[SharedWriter]:
    writer = SharedWriter(throwaway_postgres)
    try:
        yield writer
    finally:
        writer.close()


SUBSETS = [s for r in range(5) for s in itertools.combinations(range(4), r)]


@pytest.mark.parametrize("failing", SUBSETS, ids=lambda s: "fail-" + "".join(map(str, s)))
def test_any_subset_of_refused_batches_leaves_exactly_the_others_stored(
    throwaway_postgres: str, shared: SharedWriter, failing: tuple[int, ...]
) -> None:
    dsn = throwaway_postgres
    rooms, states = _open(dsn, shared, 4)
    try:
        for state in states:
            state.commit({"n": 0}, state.token, "first")
        for n in failing:
            _take_next_row(dsn, rooms[n])
        retries = shared.retries
        edits = [
            (lambda s=state, n=n: s.commit({"n": n + 1}, s.token, "second", wait=False))
            for n, state in enumerate(states)
        ]
        in_one_round(shared, dsn, GATE, edits)
        told = [durability_told(state) for state in states]
        assert shared.retries == retries + (1 if failing else 0)  # no refusal: one transaction
        for n, room in enumerate(rooms):
            if n in failing:
                assert len(told[n]) == 1 and isinstance(told[n][0], StorageError)
                error = told[n][0]
                assert isinstance(error, StorageError)  # narrows for mypy (checked above)
                assert error.details["reason"] == "rejected"
                assert error.details["key"] == room
                assert _agents(dsn, room) == ["first", "intruder"]
            else:
                assert told[n] == [None]
                assert _agents(dsn, room) == ["first", "second"]
    finally:
        for state in states:
            state.close()


def test_a_lost_connection_fails_every_batch_of_its_round(throwaway_postgres: str) -> None:
    """No retry after a lost connection; the writer connects again for the next round."""
    dsn = throwaway_postgres
    writer = SharedWriter(dsn)
    rooms, states = _open(dsn, writer, 3)
    inner = GATE + 1
    try:
        for state in states:
            state.commit({"n": 0}, state.token, "first")
        lost: list[BaseException] = []
        held = psycopg.connect(dsn, autocommit=True)
        held.execute("SELECT pg_advisory_lock(%s)", (inner,))
        waits = Recorded()  # in the stores' round, first: it waits for the lock
        waits.execute("SELECT pg_advisory_xact_lock(%s)", (inner,))

        def direct() -> None:
            try:
                writer.commit(waits, None, 0, "inner")
            except BaseException as exc:
                lost.append(exc)

        inner_round = threading.Thread(target=direct)
        try:
            rounds = writer.rounds
            with held_writer(writer, dsn, GATE):
                inner_round.start()
                for n, state in enumerate(states):
                    state.commit({"n": n + 1}, state.token, "second", wait=False)
                until(lambda: writer.waiting >= 4, "the batches were not handed in")
            until(lambda: writer.rounds >= rounds + 2, "the round never started")
            pid = writer.pid
            until(lambda: _waits_for_lock(held, pid), "the round never waited for the lock")
            held.execute("SELECT pg_terminate_backend(%s)", (pid,))
            inner_round.join(10)
        finally:
            held.close()
        told = [durability_told(state) for state in states]
        assert len(lost) == 1 and isinstance(lost[0], psycopg.OperationalError)
        assert writer.retries == 0
        for n, room in enumerate(rooms):
            assert len(told[n]) == 1 and isinstance(told[n][0], StorageError)
            error = told[n][0]
            assert isinstance(error, StorageError)  # narrows for mypy (checked above)
            assert isinstance(error.__cause__, psycopg.OperationalError)
            assert _agents(dsn, room) == ["first"]
        again = open_postgres(dsn, rooms[0] + "-again", writer=writer)
        try:
            again.commit({"ok": True}, again.token, "after")  # a fresh connection
            assert writer.pid not in (None, pid)
        finally:
            again.close()
    finally:
        for state in states:
            state.close()
        writer.close()


def _waits_for_lock(conn: psycopg.Connection[Any], pid: int | None) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted",
        (pid,),
    ).fetchone()
    return row is not None and int(row[0]) == 1
