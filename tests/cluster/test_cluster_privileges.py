"""A hub's PostgreSQL role: no ``CREATE`` needed on a current schema; what lacks is named.

Found trying the cluster as a user: a role with ``SELECT, INSERT, UPDATE, DELETE`` on
the existing tables but no ``CREATE`` on the schema (PostgreSQL 15's default) failed
every start with a raw traceback (``InsufficientPrivilege: permission denied for schema
public`` at ``CREATE TABLE IF NOT EXISTS crdt_schema``, exit status 1), because
``migrate()`` always ran that statement. Now a schema already current is only read;
a privilege the role lacks is a ``HubConfigError`` ``postgres_privileges`` (exit status
2) naming it and the ``GRANT`` that gives it, checked at start.

Each test has a database and a login role of its own (trust authentication, as the
test server is set up), both dropped at the end.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from cluster_servers import (
    RedisServer,
    create_database,
    drop_database,
    free_port,
    postgres_admin_dsn,
)
from hub_procs import HubProcess, start_refused
from psycopg import AsyncConnection
from psycopg.conninfo import make_conninfo

import sync
from crdt_state import _pg_schema as store_schema
from crdt_state.postgres import open_postgres
from sync import HubConfigError
from sync.server.cluster import MIGRATIONS, migrate
from sync.server.cluster.grants import (
    NEEDS,
    STORE_TABLES,
    Need,
    grant_statements,
    missing_privileges,
)

HUB_GRANTS = (
    "GRANT SELECT ON crdt_schema, crdt_cluster, crdt_store_schema TO {role}",
    "GRANT SELECT, INSERT, UPDATE ON crdt_rooms TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON crdt_store_snapshot, crdt_store_log,"
    " crdt_store_blame, crdt_store_conflicts, crdt_store_requests TO {role}",
    "GRANT USAGE ON SEQUENCE crdt_store_requests_n TO {role}",
)
"""What ``migrate``'s docstring (and the README) tell a hub's role needs, as written there."""


@dataclass
class Database:
    """A database of the test's own: ``owner`` (the admin's DSN) and ``hub`` (the role's)."""

    owner: str
    hub: str
    role: str

    def run(self, *statements: str) -> None:
        with psycopg.connect(self.owner, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement.format(role=self.role).encode())

    async def migrate_as_owner(self, *, store: bool = True) -> None:
        """The cluster's schema (and the room store's tables), created by their owner."""
        async with await AsyncConnection.connect(self.owner, autocommit=True) as conn:
            await migrate(conn)
        if store:
            open_postgres(self.owner, "warm-up").close()


@pytest.fixture
def database() -> Iterator[Database]:
    admin = postgres_admin_dsn()
    owner = create_database(admin)
    role = f"crdt_hub_{secrets.token_hex(4)}"
    db = Database(owner, make_conninfo(owner, user=role), role)
    try:
        db.run(
            "CREATE ROLE {role} LOGIN",
            "REVOKE CREATE ON SCHEMA public FROM PUBLIC",  # PostgreSQL 15's default, anyway
        )
        yield db
    finally:
        db.run("DROP OWNED BY {role}")
        drop_database(admin, owner)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {role}".encode())


async def migrate_as_hub(db: Database) -> int:
    async with await AsyncConnection.connect(db.hub, autocommit=True) as conn:
        return await migrate(conn)


async def test_a_current_schema_needs_no_create(database: Database) -> None:
    await database.migrate_as_owner()
    database.run(*HUB_GRANTS)
    assert await migrate_as_hub(database) == len(MIGRATIONS)


async def test_a_new_database_says_to_grant_create(database: Database) -> None:
    with pytest.raises(HubConfigError) as info:
        await migrate_as_hub(database)
    error = info.value
    assert error.code == "postgres_privileges"
    assert "permission denied for schema public" in str(error)
    assert f"GRANT CREATE ON SCHEMA public TO {database.role};" in str(error)


async def test_a_role_that_cannot_read_the_version_is_told_which_grant(
    database: Database,
) -> None:
    await database.migrate_as_owner()
    with pytest.raises(HubConfigError) as info:
        await migrate_as_hub(database)
    assert info.value.code == "postgres_privileges"
    assert f"GRANT SELECT ON crdt_schema TO {database.role};" in str(info.value)


async def test_a_missing_privilege_is_named_at_start(database: Database, redis_url: str) -> None:
    await database.migrate_as_owner()
    database.run(*HUB_GRANTS, "REVOKE UPDATE ON crdt_rooms FROM {role}")
    error = await start_refused(redis_url, database.hub)
    message = str(error)
    assert error.code == "postgres_privileges" and "lacks UPDATE on crdt_rooms" in message
    assert f"GRANT UPDATE ON crdt_rooms TO {database.role};" in message


async def test_missing_store_tables_need_create(database: Database, redis_url: str) -> None:
    await database.migrate_as_owner(store=False)  # no room opened yet
    database.run(
        "GRANT SELECT ON crdt_schema, crdt_cluster TO {role}",
        "GRANT SELECT, INSERT, UPDATE ON crdt_rooms TO {role}",
    )
    error = await start_refused(redis_url, database.hub)
    assert "crdt_store_log" in str(error)
    assert f"GRANT CREATE ON SCHEMA public TO {database.role};" in str(error)


async def test_a_hub_serves_with_only_the_documented_grants(
    database: Database, private_redis: RedisServer, tmp_path: Path
) -> None:
    await database.migrate_as_owner()
    database.run(*HUB_GRANTS)
    hub = HubProcess(private_redis.url, database.hub, tmp_path, name="granted")
    try:
        hub.start()
        async with (
            sync.connect(hub.url("granted"), agent="a", timeout=10) as remote,
            remote.fork() as branch,
        ):
            branch["n"] = 1
        async with sync.connect(hub.url("granted"), agent="b", timeout=10) as remote:
            assert remote.snapshot() == {"n": 1}
    finally:
        hub.stop()
        print(hub.tail())


def test_the_hub_command_exits_2_with_what_to_grant(database: Database, redis_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sync.cli", "hub", "--insecure", "--port", str(free_port()),
         "--redis", redis_url, "--postgres", database.hub],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "(postgres_privileges)" in done.stderr and "Traceback" not in done.stderr
    assert "GRANT CREATE ON SCHEMA public" in done.stderr


def test_the_store_tables_checked_are_the_stores() -> None:
    statements = " ".join(s for _, group in store_schema.MIGRATIONS for s in group)
    tables = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", statements))
    sequences = set(re.findall(r"CREATE SEQUENCE IF NOT EXISTS (\w+)", statements))
    assert tables == set(STORE_TABLES)
    checked = {n.relation for n in NEEDS}
    assert tables | sequences | {"crdt_store_schema"} <= checked


def test_missing_privileges_and_their_grants() -> None:
    rows = [
        ("crdt_schema", "table", "SELECT", True),
        ("crdt_rooms", "table", "SELECT", True),
        ("crdt_rooms", "table", "INSERT", False),
        ("crdt_rooms", "table", "UPDATE", False),
        ("crdt_store_log", "table", "SELECT", None),
        ("crdt_store_log", "table", "DELETE", None),
    ]
    missing, absent = missing_privileges(rows)
    assert missing == [Need("crdt_rooms", "table", ("INSERT", "UPDATE"))]
    assert absent == ["crdt_store_log"]
    assert grant_statements("Hub Role", missing) == [
        'GRANT INSERT, UPDATE ON crdt_rooms TO "Hub Role";'
    ]
    assert grant_statements("hub", [Need("s", "sequence", ("USAGE",))]) == [
        "GRANT USAGE ON SEQUENCE s TO hub;"
    ]
