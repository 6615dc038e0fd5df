"""The cluster's PostgreSQL migrations: idempotent, concurrent-safe, refusing newer schemas;
the cluster's id (its Redis key space) made once per database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from cluster_servers import create_database, drop_database, postgres_admin_dsn
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from sync.server.cluster import (
    MIGRATIONS,
    ClusterSchemaError,
    KeySpace,
    Migration,
    cluster_id,
    migrate,
    schema_version,
)
from sync.server.cluster.schema import check_migrations


@pytest.fixture
def fresh_dsn() -> Iterator[str]:
    """An empty database of this test's own (not migrated)."""
    admin = postgres_admin_dsn()
    try:
        dsn = create_database(admin)
    except psycopg.Error as exc:
        pytest.fail(f"PostgreSQL at {admin!r} is not usable: {exc}", pytrace=False)
    try:
        yield dsn
    finally:
        drop_database(admin, dsn)


NEXT = len(MIGRATIONS) + 1
"""The version of a migration this code does not know yet."""


async def tables(conn: AsyncConnection[TupleRow]) -> set[str]:
    cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    return {str(row[0]) for row in await cur.fetchall()}


async def test_migrate_creates_the_schema_once(fresh_dsn: str) -> None:
    async with await AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        assert await schema_version(conn) == 0
        newest = len(MIGRATIONS)
        assert await migrate(conn) == newest == 4
        assert await tables(conn) == {"crdt_rooms", "crdt_schema", "crdt_cluster"}
        await conn.execute("INSERT INTO crdt_rooms (room, fence, owner) VALUES ('r', 7, 'x')")
        assert await migrate(conn) == newest  # a second run changes nothing
        cur = await conn.execute("SELECT room, fence, stream_position FROM crdt_rooms")
        assert await cur.fetchall() == [("r", 7, None)]
        cur = await conn.execute("SELECT version FROM crdt_schema ORDER BY version")
        assert await cur.fetchall() == [(v,) for v in range(1, newest + 1)]


async def test_concurrent_migrations_from_many_hubs_all_succeed(fresh_dsn: str) -> None:
    conns = [await AsyncConnection.connect(fresh_dsn, autocommit=True) for _ in range(6)]
    try:
        versions = await asyncio.gather(*(migrate(conn) for conn in conns))
        assert versions == [len(MIGRATIONS)] * 6
        cur = await conns[0].execute("SELECT count(*) FROM crdt_schema")
        assert await cur.fetchone() == (len(MIGRATIONS),)
    finally:
        for conn in conns:
            await conn.close()


async def test_a_later_migration_applies_alone_on_a_migrated_database(fresh_dsn: str) -> None:
    later = (*MIGRATIONS, Migration(NEXT, "log", ("CREATE TABLE crdt_test_log (n int)",)))
    async with await AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await migrate(conn)
        assert await migrate(conn, later) == NEXT
        assert "crdt_test_log" in await tables(conn)
        assert await schema_version(conn) == NEXT


async def test_a_newer_schema_is_refused_untouched(fresh_dsn: str) -> None:
    later = (*MIGRATIONS, Migration(NEXT, "log", ("CREATE TABLE crdt_test_log (n int)",)))
    async with await AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await migrate(conn, later)
        with pytest.raises(ClusterSchemaError) as caught:
            await migrate(conn)  # this code knows one version less
        assert caught.value.code == "cluster_schema"
        assert caught.value.details == {"found": NEXT, "known": NEXT - 1}
        assert await schema_version(conn) == NEXT


async def test_migrate_refuses_a_connection_inside_a_transaction(fresh_dsn: str) -> None:
    async with await AsyncConnection.connect(fresh_dsn) as conn:
        await conn.execute("SELECT 1")  # non-autocommit: a transaction is open now
        with pytest.raises(ValueError):
            await migrate(conn)


@pytest.mark.parametrize(
    "migrations",
    [
        (Migration(2, "gap", ("SELECT 1",)),),
        (Migration(1, "a", ("SELECT 1",)), Migration(1, "again", ("SELECT 1",))),
        (Migration(1, "empty", ()),),
    ],
)
def test_migration_lists_must_count_from_one(migrations: tuple[Migration, ...]) -> None:
    with pytest.raises(ValueError):
        check_migrations(migrations)


async def test_a_new_database_gets_one_cluster_id_kept_by_later_migrations(fresh_dsn: str) -> None:
    async with await AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await migrate(conn)
        cur = await conn.execute("SELECT id, created_at FROM crdt_cluster")
        rows = await cur.fetchall()
        assert len(rows) == 1 and rows[0][1] is not None
        found = await cluster_id(conn)
        assert found == rows[0][0] and len(found) == 16
        assert int(found, 16) >= 0  # hex digits
        assert KeySpace(found).key("main", "in") == f"crdt:{found}:{{main}}:in"
        assert await migrate(conn) == len(MIGRATIONS)  # a second run changes nothing
        assert await cluster_id(conn) == found
    async with await AsyncConnection.connect(fresh_dsn, autocommit=True) as other:
        assert await cluster_id(other) == found  # another hub reads the same


async def test_two_databases_get_different_cluster_ids(fresh_dsn: str) -> None:
    admin = postgres_admin_dsn()
    second = create_database(admin)
    try:
        ids = []
        for dsn in (fresh_dsn, second):
            async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
                await migrate(conn)
                ids.append(await cluster_id(conn))
        assert ids[0] != ids[1]
    finally:
        drop_database(admin, second)


async def test_the_cluster_table_holds_one_usable_id(fresh_dsn: str) -> None:
    async with await AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await migrate(conn)
        with pytest.raises(psycopg.errors.UniqueViolation):  # one row, whatever its id
            await conn.execute("INSERT INTO crdt_cluster (id) VALUES ('another')")
        with pytest.raises(psycopg.errors.CheckViolation):  # nothing that confuses keys
            await conn.execute("UPDATE crdt_cluster SET id = 'a:{b}'")
        await conn.execute("UPDATE crdt_cluster SET id = 'staging-copy'")  # a copy renamed
        assert await cluster_id(conn) == "staging-copy"
        await conn.execute("DELETE FROM crdt_cluster")
        with pytest.raises(ClusterSchemaError) as caught:
            await cluster_id(conn)
        assert caught.value.code == "cluster_schema"
        assert caught.value.details == {"cluster_id": None}
