"""Throwaway PostgreSQL databases for tests (the cluster's and the PostgreSQL store's).

The server is ``CRDT_STATE_TEST_POSTGRES`` (a libpq DSN; default
``host=127.0.0.1 user=postgres dbname=postgres``); each database gets a random name and
is dropped ``WITH (FORCE)`` by its owner. ``tests/conftest.py`` wraps them in the
``throwaway_postgres`` fixture.
"""

from __future__ import annotations

import os
import secrets

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

DEFAULT_POSTGRES = "host=127.0.0.1 user=postgres dbname=postgres"


def postgres_admin_dsn() -> str:
    """The server for throwaway databases: ``CRDT_STATE_TEST_POSTGRES`` or the default DSN."""
    return os.environ.get("CRDT_STATE_TEST_POSTGRES") or DEFAULT_POSTGRES


def create_database(admin_dsn: str) -> str:
    """Create a database with a random name on the server of ``admin_dsn``; its DSN."""
    name = f"crdt_test_{secrets.token_hex(6)}"
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_conninfo(admin_dsn, dbname=name)


def drop_database(admin_dsn: str, dsn: str) -> None:
    """Drop the database of ``dsn``, disconnecting whoever is still in it."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
        )
