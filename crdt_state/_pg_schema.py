"""The PostgreSQL format of durable states: tables shared by many states, versioned.

Every state (a hub's room, say) is one ``key`` (text) in tables shared by all
the states of a database. The tables mirror the SQLite file format
(:mod:`crdt_state._sqlite_file`), with the key in front of every primary key::

    crdt_store_schema    (version, name, applied_at)  the migrations applied
    crdt_store_snapshot  (key, seq, token, doc, time)  one Yjs update (zlib-compressed)
                                       holding every change up to log position ``seq``
                                       (one row per key; compaction inserts the new
                                       row and deletes the old one in one transaction)
    crdt_store_log       (key, seq, token, doc_update, agent, origin, time, paths)
                                       the changes after the snapshot, contiguous seqs;
                                       ``token`` is the state's version after the change
    crdt_store_blame     (key, path, seq, agent, time, token)
                                       the last change that wrote each path
    crdt_store_conflicts (key, id, time, path, base, current, incoming,
                          current_agent, incoming_agent, policy, resolution,
                          applied, token)   the conflict audit log
    crdt_store_requests  (key, writer, id, seq, token, paths, clean, n)
                                       the newest applied requests, unique per
                                       ``(key, writer, id)``; ``n`` orders them by the
                                       time they were last stored (SQLite's rowid)

Paths and values are encoded exactly as in the SQLite format (ASCII JSON
arrays; wrapped JSON values); path columns use the ``"C"`` collation, so the
descendants of a path are one key range whatever the database's collation.

:func:`migrate` brings a database up to :data:`MIGRATIONS` (idempotent, safe
from many processes at once: a transaction-scoped advisory lock serialises
it; a database already up to date is only read, so states opening at once do not
queue for the lock); a database with a newer schema is refused untouched. An applied
migration is never edited; later formats append migrations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .errors import StorageError

if TYPE_CHECKING:
    import psycopg

__all__ = ["ADVISORY_CLASS", "MIGRATIONS", "migrate", "schema_version"]

ADVISORY_CLASS: Final = 0x63727374  # "crst": first key of this module's advisory locks
_MIGRATION_LOCK: Final = 0  # second key of the migration lock (writer locks use hashtext(key))

MIGRATIONS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "snapshot, log, blame, audit log and requests per key",
        (
            "CREATE TABLE IF NOT EXISTS crdt_store_snapshot (key text NOT NULL,"
            " seq bigint NOT NULL, token bytea NOT NULL, doc bytea NOT NULL,"
            " time double precision NOT NULL, PRIMARY KEY (key, seq))",
            "CREATE TABLE IF NOT EXISTS crdt_store_log (key text NOT NULL, seq bigint NOT NULL,"
            " token bytea NOT NULL, doc_update bytea NOT NULL, agent text, origin text NOT NULL,"
            " time double precision NOT NULL, paths text NOT NULL, PRIMARY KEY (key, seq))",
            "CREATE INDEX IF NOT EXISTS crdt_store_log_token ON crdt_store_log (key, md5(token))",
            'CREATE TABLE IF NOT EXISTS crdt_store_blame (key text NOT NULL, path text COLLATE "C"'
            " NOT NULL, seq bigint NOT NULL, agent text, time double precision NOT NULL,"
            " token bytea NOT NULL, PRIMARY KEY (key, path))",
            "CREATE TABLE IF NOT EXISTS crdt_store_conflicts (key text NOT NULL,"
            " id bigint GENERATED ALWAYS AS IDENTITY, time double precision NOT NULL,"
            ' path text COLLATE "C" NOT NULL, base text NOT NULL, current text NOT NULL,'
            " incoming text NOT NULL, current_agent text, incoming_agent text, policy text,"
            " resolution text NOT NULL, applied boolean NOT NULL, token bytea NOT NULL,"
            " PRIMARY KEY (key, id))",
            "CREATE INDEX IF NOT EXISTS crdt_store_conflicts_path"
            " ON crdt_store_conflicts (key, path)",
            "CREATE INDEX IF NOT EXISTS crdt_store_conflicts_time"
            " ON crdt_store_conflicts (key, time)",
            "CREATE SEQUENCE IF NOT EXISTS crdt_store_requests_n",
            "CREATE TABLE IF NOT EXISTS crdt_store_requests (key text NOT NULL,"
            " writer text NOT NULL, id bigint NOT NULL, seq bigint NOT NULL,"
            " token bytea NOT NULL, paths text NOT NULL, clean boolean NOT NULL,"
            " n bigint NOT NULL DEFAULT nextval('crdt_store_requests_n'),"
            " PRIMARY KEY (key, writer, id))",
            "CREATE INDEX IF NOT EXISTS crdt_store_requests_recent ON crdt_store_requests (key, n)",
        ),
    ),
)
"""``(name, statements)`` per format version (1, 2, ...); applied in order, never edited."""

_VERSION_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS crdt_store_schema (version integer PRIMARY KEY,"
    " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
)


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The newest store migration applied to the database (0 when never migrated)."""
    row = conn.execute("SELECT to_regclass('crdt_store_schema') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    found = conn.execute("SELECT coalesce(max(version), 0) FROM crdt_store_schema").fetchone()
    return int(found[0]) if found is not None else 0


def migrate(conn: psycopg.Connection[Any], where: str) -> int:
    """Create or upgrade the store's tables; returns the format version in force.

    Args:
        conn: a connection outside any transaction (autocommit); each
            migration commits with its ``crdt_store_schema`` row.
        where: the database, for messages (no password).

    Raises:
        StorageError: the database has a newer format than this code knows (untouched).
    """
    if schema_version(conn) == len(MIGRATIONS):  # a committed migration is final: no lock
        return len(MIGRATIONS)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (ADVISORY_CLASS, _MIGRATION_LOCK))
        conn.execute(_VERSION_TABLE)
        found = schema_version(conn)
        if found > len(MIGRATIONS):
            raise StorageError(
                f"the database has store format {found}, newer than {len(MIGRATIONS)}:"
                " upgrade crdt-state",
                details={"database": where, "found": found, "known": len(MIGRATIONS)},
            )
        for version, (name, statements) in enumerate(MIGRATIONS[found:], start=found + 1):
            for statement in statements:
                conn.execute(statement.encode())
            conn.execute(
                "INSERT INTO crdt_store_schema (version, name) VALUES (%s, %s)", (version, name)
            )
    return len(MIGRATIONS)
