"""What only the PostgreSQL store does: many keys per database, the before_commit hook
(fencing), the writer lock, read-only loads, refused connections, a server lost mid-write.

The storage contract itself (merges, reopen, history, blame, audit, compaction, epochs)
runs against both stores in test_storage*.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path as FilePath
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crdt_state import Change, SharedState, StorageError, resolvers
from crdt_state import _pg_schema as pgschema
from crdt_state.postgres import PostgresStore, load_stored, open_postgres

ROOT = FilePath(__file__).resolve().parents[2]
_keys = iter(range(10**9))


def fresh_key() -> str:
    return f"pg-room-{next(_keys)}"


def rows(dsn: str, table: str, key: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            f"SELECT count(*) FROM crdt_store_{table} WHERE key = %s", (key,)
        ).fetchone()
    assert found is not None
    return int(found[0])


def test_a_new_process_reopens_the_same_content_and_history(throwaway_postgres: str) -> None:
    key = fresh_key()
    state = open_postgres(throwaway_postgres, key, keep_history=30)
    for i in range(80):
        state.commit({f"k{i % 7}": i, "list": [i]}, state.token, f"agent{i % 3}")
    state.commit([Change("append", ("log",), ["x"])], state.token, "ann", request_id=5)
    expected = {
        "content": state.snapshot(),
        "token": str(state.token),
        "history": [[h.seq, h.agent, [list(p) for p in h.paths]] for h in state.history()],
    }
    state.close()
    script = textwrap.dedent(
        """
        import json, sys
        from crdt_state import Change
        from crdt_state.postgres import open_postgres
        state = open_postgres(sys.argv[1], sys.argv[2])
        again = state.commit([Change("append", ("log",), ["x"])], state.token, "ann",
                             request_id=5)  # remembered across the restart: not applied
        print(json.dumps({
            "content": state.snapshot(),
            "token": str(state.token),
            "history": [[h.seq, h.agent, [list(p) for p in h.paths]] for h in state.history()],
        }))
        state.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, throwaway_postgres, key],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected
    assert len(expected["history"]) >= 30  # the retained history, not just the content


def test_keys_are_isolated(throwaway_postgres: str) -> None:
    one_key, two_key = fresh_key(), fresh_key()
    policies: dict[str, Any] = {"resolvers": {"n": resolvers.maximum}}
    one = open_postgres(throwaway_postgres, one_key, keep_history=5, **policies)
    two = open_postgres(throwaway_postgres, two_key, keep_history=5, **policies)
    one.commit({"n": 1, "who": "one"}, one.token, "ann")
    base = one.token
    one.commit({"n": 5}, one.token, "ann")
    one.commit({"n": 3}, base, "bob")  # a conflict in one's audit log only
    for i in range(100):  # compacts two, never one
        two.commit({"who": "two", "i": i}, two.token, "cy")
    assert one.snapshot() == {"n": 5, "who": "one"}
    assert two.snapshot() == {"who": "two", "i": 99}
    assert [h.agent for h in one.history()] == ["ann", "ann"]
    assert {h.agent for h in two.history()} == {"cy"}
    assert len(one.conflicts()) == 1 and two.conflicts() == []
    blame = one.blame("who")
    assert blame is not None and blame.agent == "ann"
    one.close()
    two.close()
    assert rows(throwaway_postgres, "log", one_key) == 2
    assert rows(throwaway_postgres, "log", two_key) <= 5 + 64
    again = open_postgres(throwaway_postgres, one_key)
    assert again.snapshot() == {"n": 5, "who": "one"}
    again.close()


FENCE_TABLE = "CREATE TABLE IF NOT EXISTS test_fences (room text PRIMARY KEY, fence bigint)"
POSITIONS_TABLE = "CREATE TABLE IF NOT EXISTS test_positions (room text PRIMARY KEY, ticket bigint)"


class StaleFence(Exception):
    pass


def fenced(room: str, mine: int) -> Any:
    """A before_commit hook like the hub cluster's: check the fence, store a position."""

    def before_commit(conn: psycopg.Connection[Any], last_ticket: int) -> None:
        row = conn.execute(
            "SELECT fence FROM test_fences WHERE room = %s FOR UPDATE", (room,)
        ).fetchone()
        if row is None or row[0] != mine:
            raise StaleFence(f"fence {mine} is stale (now {row[0] if row else None})")
        conn.execute(
            "INSERT INTO test_positions (room, ticket) VALUES (%s, %s)"
            " ON CONFLICT (room) DO UPDATE SET ticket = excluded.ticket",
            (room, last_ticket),
        )

    return before_commit


def test_a_stale_fence_stores_nothing_and_fails_the_store(throwaway_postgres: str) -> None:
    dsn, room = throwaway_postgres, fresh_key()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FENCE_TABLE)
        conn.execute(POSITIONS_TABLE)
        conn.execute("INSERT INTO test_fences VALUES (%s, 1)", (room,))
    state = open_postgres(dsn, room, before_commit=fenced(room, 1))
    state.commit({"owner": "first"}, state.token, "ann")
    stored = state.token
    with psycopg.connect(dsn, autocommit=True) as conn:
        position = conn.execute("SELECT ticket FROM test_positions WHERE room = %s", (room,))
        assert position.fetchone() == (1,)  # written in the same transaction as the change
        conn.execute("UPDATE test_fences SET fence = 2 WHERE room = %s", (room,))  # a new owner
    with pytest.raises(StorageError) as info:
        state.commit({"owner": "stale"}, state.token, "ann")
    assert isinstance(info.value.__cause__, StaleFence)
    with pytest.raises(StorageError) as later:  # every later write fails too
        state.commit({"other": 1}, state.token, "bob")
    assert isinstance(later.value.__cause__, StaleFence)
    state.close()
    assert rows(dsn, "log", room) == 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        position = conn.execute("SELECT ticket FROM test_positions WHERE room = %s", (room,))
        assert position.fetchone() == (1,)  # the refused transaction left nothing
    again = open_postgres(dsn, room, before_commit=fenced(room, 2))  # the new owner
    assert again.snapshot() == {"owner": "first"} and again.token == stored
    again.commit({"owner": "second"}, again.token, "cy")
    again.close()
    assert load_stored(dsn, room) is not None


def test_a_second_writer_is_refused_while_readers_load(throwaway_postgres: str) -> None:
    key = fresh_key()
    assert load_stored(throwaway_postgres, key) is None  # nothing stored under it yet
    owner = open_postgres(throwaway_postgres, key)
    owner.commit({"a": 1}, owner.token, "ann")
    with pytest.raises(StorageError) as info:
        open_postgres(throwaway_postgres, key)
    assert info.value.code == "storage" and info.value.details["reason"] == "in_use"
    assert "open in another process" in info.value.message
    stored = load_stored(throwaway_postgres, key)  # no lock needed
    assert stored is not None and stored.head == owner.token
    replica = SharedState.open_store(PostgresStore.open(throwaway_postgres, key, read_only=True))
    assert replica.snapshot() == {"a": 1} and replica.token == owner.token
    assert [h.agent for h in replica.history()] == ["ann"]
    with pytest.raises(StorageError) as refused:
        replica.commit({"b": 2}, replica.token, "bob")  # read-only: never stored
    assert refused.value.details["reason"] == "read_only"
    replica.close()
    owner.commit({"c": 3}, owner.token, "ann")  # the owner is unaffected
    owner.close()
    again = open_postgres(throwaway_postgres, key)
    assert again.snapshot() == {"a": 1, "c": 3}
    again.close()


def test_a_read_only_open_of_a_key_never_stored_says_so_and_creates_nothing(
    throwaway_postgres: str,
) -> None:
    key = fresh_key()
    with pytest.raises(StorageError) as info:
        open_postgres(throwaway_postgres, key, read_only=True)
    error = info.value
    assert error.details["reason"] == "missing", error
    assert "nothing is stored here yet" in error.message
    assert error.details["store"].endswith(f"#{key}")
    assert load_stored(throwaway_postgres, key) is None  # still nothing under the key
    written = open_postgres(throwaway_postgres, key)  # a writer may create it as before
    written.commit({"a": 1}, written.token, "ann")
    written.close()
    reader = open_postgres(throwaway_postgres, key, read_only=True)
    assert reader.snapshot() == {"a": 1}
    reader.close()


def test_a_server_that_does_not_answer_is_a_storage_error_without_the_password() -> None:
    dsn = "host=127.0.0.1 port=1 user=someone password=s3cret-word dbname=rooms"
    with pytest.raises(StorageError) as info:
        open_postgres(dsn, "room", connect_timeout=2)
    error = info.value
    assert error.code == "storage" and error.details["reason"] == "unavailable"
    assert "postgresql://someone@127.0.0.1:1/rooms" in error.message
    assert "s3cret-word" not in str(error) and "s3cret-word" not in repr(error.details)
    url = "postgresql://someone:s3cret-word@127.0.0.1:1/rooms"
    with pytest.raises(StorageError) as again:
        load_stored(url, "room", connect_timeout=2)
    assert "s3cret-word" not in str(again.value)


def test_a_server_lost_mid_write_fails_the_store(throwaway_postgres: str) -> None:
    key = fresh_key()
    state = open_postgres(throwaway_postgres, key)
    state.commit({"a": 1}, state.token, "ann")
    with psycopg.connect(throwaway_postgres, autocommit=True) as admin:
        killed = admin.execute(  # the writer's session: the one holding the key's lock
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
            " AND objid::bigint = (hashtext(%s)::bigint & 4294967295)",
            (key,),
        ).fetchall()
    assert killed == [(True,)]
    with pytest.raises(StorageError) as info:
        state.commit({"b": 2}, state.token, "ann")
    assert isinstance(info.value.__cause__, psycopg.Error)
    # the server is gone, not a statement refused: the same reason as never reaching it
    assert info.value.details["reason"] == "unavailable", info.value.details
    with pytest.raises(StorageError) as later:  # a failed store stays failed, same reason
        state.commit({"c": 3}, state.token, "ann")
    assert later.value.details["reason"] == "unavailable", later.value.details
    state.close()
    again = open_postgres(throwaway_postgres, key)
    assert again.snapshot() == {"a": 1}  # exactly what was acknowledged
    again.close()


def test_a_newer_store_format_is_refused_untouched(throwaway_postgres: str) -> None:
    key = fresh_key()
    open_postgres(throwaway_postgres, key).close()
    with psycopg.connect(throwaway_postgres, autocommit=True) as conn:
        conn.execute("INSERT INTO crdt_store_schema (version, name) VALUES (99, 'future')")
    try:
        with pytest.raises(StorageError, match="newer"):
            open_postgres(throwaway_postgres, key)
    finally:
        with psycopg.connect(throwaway_postgres, autocommit=True) as conn:
            conn.execute("DELETE FROM crdt_store_schema WHERE version = 99")


def test_opening_a_migrated_database_does_not_wait_for_the_migration_lock(
    throwaway_postgres: str,
) -> None:
    """Judges of many rooms open at once after a failover: none queues behind another."""
    key = fresh_key()
    open_postgres(throwaway_postgres, key).close()
    with psycopg.connect(throwaway_postgres, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s, 0)", (pgschema.ADVISORY_CLASS,))
        with psycopg.connect(throwaway_postgres, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '2s'")  # waiting for the lock would fail
            assert pgschema.migrate(conn, "test") == len(pgschema.MIGRATIONS)
        state = open_postgres(throwaway_postgres, key)
        state.close()


# -- the same random program on both stores ---------------------------------------------
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("merge"),
            st.sampled_from(["ann", "bob"]),
            st.sampled_from(["a", "b", "c.x", "c.y"]),
            st.integers(0, 5),
        ),
        st.tuples(st.just("stale"), st.sampled_from(["a", "b"]), st.integers(0, 5)),
        st.tuples(st.just("compact")),
        st.tuples(st.just("reopen")),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(program=steps, keep=st.integers(1, 6))
def test_postgres_and_sqlite_agree_on_any_program(
    throwaway_postgres: str, tmp_path: FilePath, program: list[Any], keep: int
) -> None:
    key = fresh_key()
    options: dict[str, Any] = {
        "keep_history": keep,
        "resolvers": {"a": resolvers.maximum},
        "client_id": 1000 + len(program),
    }
    file = tmp_path / f"{key}.db"

    def observe(state: SharedState) -> Any:
        return (
            state.snapshot(),
            [(h.seq, h.agent, h.paths, h.origin) for h in state.history()],
            [(r.path, r.base, r.current, r.incoming, r.resolution) for r in state.conflicts()],
            [(p, b.agent, b.seq) for p in ("a", "b", "c") if (b := state.blame(p)) is not None],
        )

    def run(opener: Any) -> list[Any]:
        state, seen, base = opener(**options), [], None
        for step in program:
            if step[0] == "merge":
                state.commit({step[2]: step[3]}, state.token, step[1])
                base = base or state.token
            elif step[0] == "stale" and base is not None:
                try:
                    state.commit({step[1]: step[2]}, base, "late")
                except Exception as exc:  # refused merges are audited; some bases are stale
                    seen.append(type(exc).__name__)
            elif step[0] == "compact":
                store = state.store
                assert store is not None
                store.flush()
                store._compact()
            elif step[0] == "reopen":
                state.close()
                state = opener(**{k: v for k, v in options.items() if k != "client_id"})
                base = None
            seen.append(observe(state))
        state.close()
        return seen

    on_sqlite = run(lambda **o: SharedState.open(file, **o))
    on_postgres = run(lambda **o: open_postgres(throwaway_postgres, key, **o))
    assert on_postgres == on_sqlite


def test_damaged_rows_are_refused_untouched(throwaway_postgres: str) -> None:
    dsn = throwaway_postgres
    damage = {
        "gap": "DELETE FROM crdt_store_log WHERE key = %s AND seq = 10",
        "no snapshot": "DELETE FROM crdt_store_snapshot WHERE key = %s",
        "bad blob": "UPDATE crdt_store_snapshot SET doc = '\\xffff00'::bytea WHERE key = %s",
        "bad update": "UPDATE crdt_store_log SET doc_update = '\\x05ffff01'::bytea"
        " WHERE key = %s AND seq = 5",
    }
    for words, statement in damage.items():
        key = fresh_key()
        state = open_postgres(dsn, key)
        for i in range(20):
            state.commit({f"k{i}": i}, state.token, "ann")
        state.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(statement, (key,))
        before = rows(dsn, "log", key), rows(dsn, "snapshot", key)
        with pytest.raises(StorageError, match="damaged"):
            open_postgres(dsn, key)
        assert (rows(dsn, "log", key), rows(dsn, "snapshot", key)) == before, words


def test_a_compaction_refused_by_the_hook_changes_nothing_and_fails_the_store(
    throwaway_postgres: str,
) -> None:
    dsn, room = throwaway_postgres, fresh_key()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FENCE_TABLE)
        conn.execute(POSITIONS_TABLE)
        conn.execute("INSERT INTO test_fences VALUES (%s, 1)", (room,))
    state = open_postgres(dsn, room, keep_history=2, before_commit=fenced(room, 1))
    for i in range(10):
        state.commit({"n": i}, state.token, "ann")
    store = state.store
    assert isinstance(store, PostgresStore)
    before = rows(dsn, "log", room)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE test_fences SET fence = 2 WHERE room = %s", (room,))
    store._compact()  # what the writer runs once the log is long enough
    assert store.last_compaction_error is not None
    assert isinstance(store.last_compaction_error.__cause__, StaleFence)
    assert rows(dsn, "log", room) == before  # the refused compaction left the rows
    with pytest.raises(StorageError) as info:
        state.commit({"n": 99}, state.token, "ann")
    assert isinstance(info.value.__cause__, StaleFence)
    state.close()
    assert rows(dsn, "log", room) == before


@pytest.mark.parametrize(
    ("table", "column", "value", "named"),
    [
        ("crdt_store_log", "paths", "{not json", "log.paths"),
        ("crdt_store_conflicts", "base", "[1]", "conflicts.base"),
        ("crdt_store_requests", "paths", '{"a": 1}', "writer_requests.paths"),
    ],
)
def test_damaged_rows_raise_storage_error_naming_the_column(
    throwaway_postgres: str, table: str, column: str, value: str, named: str
) -> None:
    key = fresh_key()
    state = open_postgres(throwaway_postgres, key)
    base = state.token
    state.commit({"a": 1}, base, "ann", request_id=1)
    state.commit({"a": 2}, base, "bob", resolvers={"a": resolvers.maximum}, request_id=2)
    state.close()
    with psycopg.connect(throwaway_postgres) as conn:
        conn.execute(f"UPDATE {table} SET {column} = %s WHERE key = %s", (value, key))
    with pytest.raises(StorageError) as info:
        again = open_postgres(throwaway_postgres, key)
        try:
            again.history()
            again.conflicts()
        finally:
            again.close()
    assert info.value.code == "storage"
    assert "stored state is damaged" in str(info.value) and named in str(info.value)
