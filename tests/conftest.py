"""Fixtures shared by the whole suite (helpers they use: ``tests/hubs.py``).

- ``hub``: a hub in memory on a free loopback port, on the test's event loop;
- ``secured``: the same, needing access tokens minted with :data:`hubs.SECRET`;
- ``hub_url`` / ``secured_hub_url``: ``ws://127.0.0.1:<port>`` of such a hub running on
  its own event-loop thread (for tests made of plain threads or subprocesses);
- ``throwaway_postgres``: the DSN of a fresh database per test module on the server of
  ``CRDT_STATE_TEST_POSTGRES`` (``tests/throwaway_postgres.py``), dropped afterwards;
- ``stores``: where the storage contract tests keep their states, once per store
  (SQLite files, PostgreSQL keys; ``tests/store_places.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hubs import SECRET, hub_on_thread
from store_places import PostgresStores, SqliteStores
from throwaway_postgres import create_database, drop_database, postgres_admin_dsn

from sync import Hub


@pytest.fixture
async def hub() -> AsyncIterator[Hub]:
    """A hub in memory, without a secret, on a free port."""
    async with Hub(port=0) as running:
        yield running


@pytest.fixture
async def secured() -> AsyncIterator[Hub]:
    """A hub in memory whose clients need tokens minted with :data:`hubs.SECRET`."""
    async with Hub(port=0, secret=SECRET) as running:
        yield running


@pytest.fixture
def hub_url() -> Iterator[str]:
    """``ws://127.0.0.1:<port>`` of a hub (no secret) running on its own event-loop thread."""
    yield from hub_on_thread()


@pytest.fixture
def secured_hub_url() -> Iterator[str]:
    """Like ``hub_url``, for a hub that needs tokens minted with :data:`hubs.SECRET`."""
    yield from hub_on_thread(SECRET)


@pytest.fixture(scope="module")
def throwaway_postgres() -> Iterator[str]:
    """A fresh, empty database for this test module; dropped after its tests."""
    admin = postgres_admin_dsn()
    try:
        dsn = create_database(admin)
    except psycopg.Error as exc:
        pytest.fail(
            f"PostgreSQL at {admin!r} is not usable ({exc}); run scripts/test.sh or set "
            "CRDT_STATE_TEST_POSTGRES",
            pytrace=False,
        )
    try:
        yield dsn
    finally:
        drop_database(admin, dsn)


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Fresh places for durable states: SQLite files, then keys in a throwaway database."""
    if request.param == "sqlite":
        return SqliteStores(tmp_path)
    return PostgresStores(request.getfixturevalue("throwaway_postgres"))
