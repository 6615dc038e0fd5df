"""Where durable states of the storage contract tests live: SQLite files or PostgreSQL keys.

The ``stores`` fixture (``tests/conftest.py``) is one of these, per parameter: tests that
exercise the storage interface through a :class:`~crdt_state.SharedState` take fresh
places from it and run the same assertions against both stores.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from crdt_state import SharedState
from crdt_state.postgres import PostgresStore, open_postgres
from crdt_state.storage import SqliteStore

_names = itertools.count()


class SqlitePlace:
    """One state file."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def open(self, **options: Any) -> SharedState:
        return SharedState.open(self.file, **options)

    def __str__(self) -> str:
        return str(self.file)


class PostgresPlace:
    """One key in a throwaway database."""

    def __init__(self, dsn: str, key: str) -> None:
        self.dsn = dsn
        self.key = key

    def open(self, **options: Any) -> SharedState:
        return open_postgres(self.dsn, self.key, **options)

    def __str__(self) -> str:
        return f"{self.key} in {self.dsn}"


class SqliteStores:
    """Fresh SQLite files in a test's temporary directory."""

    kind: ClassVar[str] = "sqlite"
    store_class: ClassVar[type[Any]] = SqliteStore

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def fresh(self) -> SqlitePlace:
        """A new file (hypothesis reuses the fixture across examples: names never repeat)."""
        return SqlitePlace(self.directory / f"state-{next(_names)}.db")

    def rows(self, place: Any, table: str) -> int:
        """How many rows ``table`` (snapshot, log, ...) holds for ``place``."""
        import sqlite3

        with sqlite3.connect(place.file) as conn:
            found = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        conn.close()
        return found


class PostgresStores:
    """Fresh keys in one throwaway database."""

    kind: ClassVar[str] = "postgres"
    store_class: ClassVar[type[Any]] = PostgresStore

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def fresh(self) -> PostgresPlace:
        """A new key (never used before in this database)."""
        return PostgresPlace(self.dsn, f"room-{next(_names)}")

    def rows(self, place: Any, table: str) -> int:
        """How many rows ``crdt_store_<table>`` holds for ``place``'s key."""
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                f"SELECT count(*) FROM crdt_store_{table} WHERE key = %s", (place.key,)
            ).fetchone()
        assert row is not None
        return int(row[0])
