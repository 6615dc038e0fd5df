"""Fixtures of the cluster tests: real Redis and PostgreSQL, never skipped.

- ``private_redis``: a ``redis-server`` of the test's own on a free port (for tests that
  kill, pause or restart Redis), stopped and waited for at teardown;
- ``private_postgres``: a PostgreSQL server of the test's own (``postgres_server.py``),
  for tests that crash and restart it; stopped and its files deleted at teardown;
- ``redis_url``: the machine's Redis (``CRDT_STATE_TEST_REDIS`` or 127.0.0.1:6379);
- ``postgres_dsn``: a throwaway database per test module, created on the server of
  ``CRDT_STATE_TEST_POSTGRES`` (default ``host=127.0.0.1 user=postgres dbname=postgres``)
  and dropped ``WITH (FORCE)`` at the end, with the cluster schema migrated;
- ``pool``, ``redis``: clients (``sync.server.cluster.postgres_pool``, ``redis_client``);
- ``hubs``: two hubs in process (ports of their own) on ``private_redis`` and ``postgres_dsn``;
- ``two_hubs``, ``three_hubs``: hub processes (``python -m sync.cli hub``) on
  ``private_redis`` and ``postgres_dsn``, stopped at teardown (their logs printed);
- ``pg_proxy``: a :class:`~tcp_proxy.TcpProxy` in front of ``postgres_dsn``'s server, which
  a test pauses to blackhole PostgreSQL.

A server that does not answer fails the test with the reason: ``scripts/test.sh``
installs and starts the servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
from cluster_servers import RedisServer
from cluster_servers import redis_url as machine_redis_url
from hub_procs import HubCluster
from postgres_server import PostgresServer
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis
from tcp_proxy import TcpProxy

from sync import Hub
from sync.server.cluster import migrate, postgres_pool, redis_client


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server for this test only."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def two_hubs(private_redis: RedisServer, postgres_dsn: str, tmp_path: Path) -> Iterator[HubCluster]:
    """Two hub processes of one cluster."""
    with HubCluster(private_redis.url, postgres_dsn, tmp_path, 2) as cluster:
        yield cluster
        print(cluster.logs())


@pytest.fixture
def three_hubs(
    private_redis: RedisServer, postgres_dsn: str, tmp_path: Path
) -> Iterator[HubCluster]:
    """Three hub processes of one cluster."""
    with HubCluster(private_redis.url, postgres_dsn, tmp_path, 3) as cluster:
        yield cluster
        print(cluster.logs())


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for this test only (for tests that crash it)."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The machine's Redis, checked to answer."""
    url = machine_redis_url()
    try:
        redis_sync.Redis.from_url(url, socket_timeout=3, socket_connect_timeout=3).ping()
    except Exception as exc:
        pytest.fail(
            f"Redis at {url} does not answer ({exc}); run scripts/test.sh or set "
            "CRDT_STATE_TEST_REDIS",
            pytrace=False,
        )
    return url


@pytest.fixture(scope="module")
def postgres_dsn(throwaway_postgres: str) -> str:
    """A fresh database (``throwaway_postgres``) with the cluster schema migrated."""

    async def setup() -> None:
        async with await AsyncConnection.connect(throwaway_postgres, autocommit=True) as conn:
            await migrate(conn)

    asyncio.run(setup())
    return throwaway_postgres


@pytest.fixture
async def pool(postgres_dsn: str) -> AsyncIterator[AsyncConnectionPool[AsyncConnection[Any]]]:
    p = await postgres_pool(postgres_dsn)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = redis_client(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def hubs(private_redis: RedisServer, postgres_dsn: str) -> AsyncIterator[tuple[Hub, Hub]]:
    async with (
        Hub(port=0, redis=private_redis.url, postgres=postgres_dsn) as a,
        Hub(port=0, redis=private_redis.url, postgres=postgres_dsn) as b,
    ):
        yield a, b


@pytest.fixture
def pg_proxy(postgres_dsn: str) -> Iterator[TcpProxy]:
    """A proxy to the module's database, paused by the test to blackhole it."""
    port = int(conninfo_to_dict(postgres_dsn).get("port") or 5432)
    with TcpProxy(port) as proxy:
        yield proxy
