"""Clients for the cluster's servers, configured for lease deadlines.

redis-py's default retry policy backs off for seconds on a dead connection, longer than a
lease lives; the lease keeper needs each call to fail fast and retries by itself.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["CALL_TIMEOUT", "postgres_pool", "redis_client", "stream_client"]

CALL_TIMEOUT = 1.0
"""Seconds a call of a :func:`stream_client` may take beyond its own blocking time."""


def redis_client(url: str, *, timeout: float = 1.0) -> Redis:
    """A ``redis.asyncio`` client on ``url`` (``redis://host:port/db``).

    Socket connect and read timeouts of ``timeout`` seconds, and one immediate retry on a
    connection error (a pooled connection that died with a Redis restart is replaced at
    once). Close it with ``await client.aclose()``.
    """
    return Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
    )


def stream_client(url: str, *, timeout: float = CALL_TIMEOUT) -> Redis:
    """A ``redis.asyncio`` client for the hub's busiest loops: its calls carry no timeout.

    The caller bounds each call with ``asyncio.timeout`` (the ``in``/``out`` reads and the
    outbox's pipelines: their wait plus :data:`CALL_TIMEOUT`) and treats the
    ``TimeoutError`` as Redis not answering. With a ``socket_timeout`` redis-py wraps every
    socket write in ``asyncio.wait_for``, which on Python 3.11 creates a task per command:
    ~25-30 µs of CPU per call (an ``XREAD``, a pipeline), paid several times per merge.
    Connecting is bounded by ``timeout``; one immediate retry on a connection error, as
    :func:`redis_client`.
    """
    return Redis.from_url(
        url,
        socket_timeout=None,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
    )


async def postgres_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 4, timeout: float = 5.0
) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """An opened ``psycopg_pool.AsyncConnectionPool`` on ``dsn``.

    Connections are checked when taken from the pool (a server restart costs one failed
    check, not a failed query); ``timeout`` bounds the wait for a connection. Close it with
    ``await pool.close()``.
    """
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        open=False,
        check=AsyncConnectionPool.check_connection,
        kwargs={"autocommit": True},
    )
    await pool.open(wait=True, timeout=timeout)
    return pool
