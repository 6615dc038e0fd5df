"""The cluster's PostgreSQL schema: numbered migrations, applied once, idempotently.

:func:`migrate` brings a database up to the newest :data:`MIGRATIONS` entry. Every hub
calls it at start; concurrent calls are serialised by a transaction-scoped advisory lock,
each migration's statements and its row in ``crdt_schema`` commit together, and a database
whose schema is newer than this code is refused (:class:`ClusterSchemaError`) without
being touched. A database already up to date is only read, so a role without ``CREATE``
runs a hub on it; a privilege the server refuses is a
:class:`~sync.server.HubConfigError` ``postgres_privileges`` saying what to grant
(:mod:`~sync.server.cluster.grants`). Later work (the room log and snapshots of the
PostgreSQL storage) appends migrations 2, 3, ... to the tuple; an applied migration is
never edited.

Tables so far:

``crdt_rooms``
    one row per room ever claimed: ``fence`` (the fencing number, bumped by every claim),
    ``owner`` (the lease token of the last claimant), ``claimed_at``,
    ``stream_position`` (the last ``in`` entry whose judgement is committed: written by
    the owner inside its fenced write transactions; see :mod:`sync.server.cluster.pgstorage`),
    ``judge_pid`` (the server process of the session that made the last fenced write: a
    new owner ends it when it is left idle inside a transaction, see ``pgsessions.depose``).

``crdt_cluster``
    one row: ``id``, the cluster's id, random (16 hex digits), made by the migration that
    creates the table, and ``created_at``. It names the cluster's Redis key space
    (:class:`~sync.server.cluster.keys.KeySpace`, read at start by :func:`cluster_id`):
    hubs of clusters on different databases may share one Redis. A copy of the database
    (a restore for staging) keeps the id: give the copy a new one
    (``UPDATE crdt_cluster SET id = ...``, with its hubs stopped) before its hubs share a
    Redis with the original's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg
import psycopg.errors

from .errors import ClusterSchemaError, ClusterUnavailable
from .grants import privilege_error
from .keys import CLUSTER_ID

__all__ = [
    "MIGRATIONS",
    "Migration",
    "check_migrations",
    "cluster_id",
    "migrate",
    "schema_version",
]

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
    Migration(
        4,
        "the cluster's id: its Redis key space",
        (
            """
            CREATE TABLE crdt_cluster (
                id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_.-]{1,64}$'),
                created_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE UNIQUE INDEX crdt_cluster_one_row ON crdt_cluster ((true))",
            "INSERT INTO crdt_cluster (id) VALUES (left(md5(gen_random_uuid()::text), 16))",
        ),
    ),
)


_VERSION_TABLE: Final = """
CREATE TABLE IF NOT EXISTS crdt_schema (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


_HAS_VERSION_TABLE: Final = """
SELECT EXISTS (
    SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = 'crdt_schema' AND n.nspname = ANY (current_schemas(false))
)
"""
"""Whether the version table exists: a plain query of the catalog, not ``to_regclass``,
which reads the session's catalog cache: an advisory lock does not refresh it, and a hub
that had waited for another's migration saw no table and created it again."""


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
    cur = await conn.execute(_HAS_VERSION_TABLE)
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
    Idempotent and safe to run from many processes at once. A database already at the
    newest version is only read (the catalog, then the version table), without the
    lock and without ``CREATE``; otherwise, under the advisory lock, the version is read
    again and only what is missing is created.

    Privileges: creating the schema (a new database) takes ``CREATE`` on the schema
    (``public``; from PostgreSQL 15 only its owner has it by default), and a later
    migration (``ALTER TABLE``) takes owning the tables: the first hub of a release runs
    as such a role, e.g. the database's owner. A hub started on a schema already current
    needs no more than (all of them checked at start by
    :func:`~sync.server.cluster.grants.check_privileges`)::

        GRANT SELECT ON crdt_schema, crdt_cluster, crdt_store_schema TO hub;
        GRANT SELECT, INSERT, UPDATE ON crdt_rooms TO hub;
        GRANT SELECT, INSERT, UPDATE, DELETE ON crdt_store_snapshot, crdt_store_log,
            crdt_store_blame, crdt_store_conflicts, crdt_store_requests TO hub;
        GRANT USAGE ON SEQUENCE crdt_store_requests_n TO hub;

    and every hub of the cluster connects as that one role (a new owner ends a deposed
    owner's stalled sessions with ``pg_terminate_backend``). The ``crdt_store_*`` tables
    are created when the first room is opened: until then the role needs ``CREATE`` too.

    Raises:
        ClusterSchemaError: the database's schema is newer than ``migrations``.
        HubConfigError: code ``postgres_privileges``: the role may not read the version
            or create what is missing; the message names the privilege and the ``GRANT``.
        ClusterUnavailable: PostgreSQL did not answer.
    """
    check_migrations(migrations)
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError("migrate() needs a connection outside any transaction")
    doing = "read the cluster's schema version (crdt_schema)"
    try:
        found = _newest_known(await schema_version(conn), migrations)
        if found == len(migrations):  # a committed migration is final: nothing to take
            return found
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            found = _newest_known(await schema_version(conn), migrations)
            doing = "create the cluster's tables"
            if found == 0:
                await conn.execute(_VERSION_TABLE)
            for migration in migrations[found:]:
                doing = f"apply the cluster's schema migration {migration.version}"
                for statement in migration.statements:
                    await conn.execute(statement.encode())
                await conn.execute(
                    "INSERT INTO crdt_schema (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
    except psycopg.errors.InsufficientPrivilege as exc:
        raise privilege_error(conn.info.user, doing, exc) from exc
    except psycopg.OperationalError as exc:
        raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
    return len(migrations)


async def cluster_id(conn: psycopg.AsyncConnection[Any]) -> str:
    """The cluster's id, from ``crdt_cluster`` (a database migrated by :func:`migrate`).

    Raises:
        ClusterSchemaError: the table holds no row, or an id that is no
            :data:`~sync.server.cluster.keys.CLUSTER_ID` (``details``: ``cluster_id``).
        HubConfigError: code ``postgres_privileges``: the role may not read the table.
        ClusterUnavailable: PostgreSQL did not answer.
    """
    try:
        cur = await conn.execute("SELECT id FROM crdt_cluster")
        rows = await cur.fetchall()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise privilege_error(conn.info.user, "read the cluster's id", exc) from exc
    except psycopg.OperationalError as exc:
        raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc
    found = str(rows[0][0]) if len(rows) == 1 else None
    if found is None or not CLUSTER_ID.fullmatch(found):
        raise ClusterSchemaError(
            f"the database's crdt_cluster table holds no usable cluster id ({found!r}): "
            "it needs one row whose id matches " + CLUSTER_ID.pattern,
            details={"cluster_id": found},
        )
    return found


def _newest_known(found: int, migrations: Sequence[Migration]) -> int:
    """``found``, unless it is newer than ``migrations`` (:class:`ClusterSchemaError`)."""
    if found > len(migrations):
        raise ClusterSchemaError(
            f"the database has cluster schema version {found}, this code knows "
            f"up to {len(migrations)}: upgrade crdt-state",
            details={"found": found, "known": len(migrations)},
        )
    return found
