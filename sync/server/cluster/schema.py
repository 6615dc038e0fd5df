"""The cluster's PostgreSQL schema: numbered migrations, applied once, idempotently.

:func:`migrate` brings a database up to the newest :data:`MIGRATIONS` entry. Every hub
calls it at start; concurrent calls are serialised by a transaction-scoped advisory lock,
each migration's statements and its row in ``crdt_schema`` commit together, and a database
whose schema is newer than this code is refused (:class:`ClusterSchemaError`) without
being touched. Later work (the room log and snapshots of the PostgreSQL storage) appends
migrations 2, 3, ... to the tuple; an applied migration is never edited.

Tables so far:

``crdt_rooms``
    one row per room ever claimed: ``fence`` (the fencing number, bumped by every claim),
    ``owner`` (the lease token of the last claimant), ``claimed_at``,
    ``stream_position`` (the last ``in`` entry whose judgement is committed: written by
    the owner inside its fenced write transactions; see :mod:`sync.server.cluster.pgstorage`),
    ``judge_pid`` (the server process of the session that made the last fenced write: a
    new owner ends it when it is left idle inside a transaction, see ``pgsessions.depose``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg

from .errors import ClusterSchemaError, ClusterUnavailable

__all__ = ["MIGRATIONS", "Migration", "check_migrations", "migrate", "schema_version"]

_LOCK_KEY: Final = 0x63726474_73746174  # "crdtstat": the advisory lock of migrations


@dataclass(frozen=True)
class Migration:
    """One schema step: ``version`` (1, 2, ...), a ``name`` for people, its ``statements``."""

    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        1,
        "rooms and their fencing numbers",
        (
            """
            CREATE TABLE crdt_rooms (
                room text PRIMARY KEY,
                fence bigint NOT NULL CHECK (fence > 0),
                owner text NOT NULL,
                claimed_at timestamptz NOT NULL DEFAULT now()
            )
            """,
        ),
    ),
    Migration(
        2,
        "the in-stream position committed with each room's state",
        ("ALTER TABLE crdt_rooms ADD COLUMN stream_position text",),
    ),
    Migration(
        3,
        "the PostgreSQL session of each room's last fenced write",
        ("ALTER TABLE crdt_rooms ADD COLUMN judge_pid integer",),
    ),
)


def check_migrations(migrations: Sequence[Migration]) -> None:
    """Raise ``ValueError`` unless versions run 1, 2, 3, ... without gaps or repeats."""
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise ValueError(
                f"migration {migration.name!r} has version {migration.version}, expected {expected}"
            )
        if not migration.statements:
            raise ValueError(f"migration {migration.version} has no statements")


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The newest migration applied to the database (0 for a database never migrated)."""
    cur = await conn.execute("SELECT to_regclass('crdt_schema') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM crdt_schema")
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def migrate(
    conn: psycopg.AsyncConnection[Any], migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Apply the migrations the database lacks; returns the schema version now in force.

    ``conn`` must not be inside a transaction (each migration commits on return).
    Idempotent and safe to run from many processes at once.
    """
    check_migrations(migrations)
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError("migrate() needs a connection outside any transaction")
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            await conn.execute(
                """
                CREATE TABLE IF NOT EXISTS crdt_schema (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """
            )
            found = await schema_version(conn)
            if found > len(migrations):
                raise ClusterSchemaError(
                    f"the database has cluster schema version {found}, this code knows "
                    f"up to {len(migrations)}: upgrade crdt-state",
                    details={"found": found, "known": len(migrations)},
                )
            for migration in migrations[found:]:
                for statement in migration.statements:
                    await conn.execute(statement.encode())
                await conn.execute(
                    "INSERT INTO crdt_schema (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
    except psycopg.OperationalError as exc:
        raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
    return len(migrations)
