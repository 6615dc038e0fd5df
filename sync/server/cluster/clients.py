"""Clients for the cluster's servers, configured for lease deadlines; checks of their addresses.

redis-py's default retry policy backs off for seconds on a dead connection, longer than a
lease lives; the lease keeper needs each call to fail fast and retries by itself.

A hub given a Redis URL or a PostgreSQL DSN it cannot use is refused before it starts
(:func:`check_redis_url`, :func:`check_postgres_dsn`: :class:`HubConfigError`); a
PostgreSQL server it cannot reach fails its start with the server's own reason
(:func:`probe_postgres`); a Redis that does not answer yet is only reported
(:func:`probe_redis`): the hub serves its rooms once it answers, as after a restart. A
Redis that answers but refuses the hub for good (a wrong or missing password, a user
without a permission, a database number it does not have: :func:`redis_refusal`) is a
:class:`HubConfigError` too, since waiting would not change it. Messages name the
servers without their passwords.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from redis.asyncio import Redis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, NoPermissionError, RedisError, ResponseError

from crdt_state.postgres import safe_dsn
from sync.server._security import HubConfigError
from sync.server.cluster.errors import ClusterUnavailable
from sync.server.cluster.keys import DEFAULT_SPACE, KeySpace

__all__ = [
    "CALL_TIMEOUT",
    "PROBE_ROOM",
    "check_postgres_dsn",
    "check_redis_url",
    "postgres_pool",
    "probe_postgres",
    "probe_redis",
    "redis_client",
    "redis_refusal",
    "safe_redis_url",
    "stream_client",
]

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


RECONNECT_TIMEOUT: Final = 2.0
"""Seconds the pool retries a failed connection attempt (psycopg_pool waits 1 s, then
doubles the wait) before it gives the attempt up; the next request for a connection
starts a new one at once. With the pool's default (5 minutes) an outage of ``t`` seconds
left the next attempt up to ``t`` seconds after the server's return (a hub claimed its
rooms ~3 s after PostgreSQL came back from 8 s down); now at most ~1 s after."""


async def postgres_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 4,
    timeout: float = 5.0,
    reconnect_timeout: float = RECONNECT_TIMEOUT,
) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """An opened ``psycopg_pool.AsyncConnectionPool`` on ``dsn``.

    Connections are checked when taken from the pool (a server restart costs one failed
    check, not a failed query); ``timeout`` bounds the wait for a connection. Close it with
    ``await pool.close()``. ``reconnect_timeout``: see :data:`RECONNECT_TIMEOUT`.
    """
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        reconnect_timeout=reconnect_timeout,
        open=False,
        check=AsyncConnectionPool.check_connection,
        kwargs={"autocommit": True},
    )
    try:
        await pool.open(wait=True, timeout=timeout)
    except PoolTimeout as exc:  # reached a moment ago (probe_postgres), gone since
        await pool.close()
        raise ClusterUnavailable(
            "postgres", f"PostgreSQL at {safe_dsn(dsn)} did not answer in {timeout:g} s"
        ) from exc
    return pool


def safe_redis_url(url: str) -> str:
    """``url`` for messages: its password (``redis://u:pw@h``, ``?password=pw``) as ``***``."""
    try:
        parts = urlsplit(url)
        netloc, query = parts.netloc, parts.query
        if parts.password is not None:
            user = parts.username or ""
            host = parts.hostname or ""
            port = f":{parts.port}" if parts.port is not None else ""
            netloc = f"{user}:***@{host}{port}"
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key == "password" for key, _ in pairs):
            query = urlencode([(k, "***" if k == "password" else v) for k, v in pairs], safe="*")
    except ValueError:
        return "(unparsable Redis URL)"
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_DB_PATH: Final = re.compile(r"/?|/[0-9]+")
"""The path of a ``redis://`` URL: none, ``/`` (database 0), or ``/<database number>``."""


def check_redis_url(url: str) -> None:
    """Refuse a Redis URL redis-py cannot use (``redis://``, ``rediss://``, ``unix://``).

    The path of a ``redis://`` or ``rediss://`` URL is the database number: empty, ``/``
    or ``/<digits>``; anything else (``/abc``, ``/0/1``, ``/-1``) is refused, where
    redis-py would silently use database 0 (or an odd number). Whether the server has
    that database is only known once it answers (:func:`redis_refusal`).

    Raises:
        HubConfigError: code ``redis_url``; the message shows the URL without a password.
    """
    shown = safe_redis_url(url)
    try:
        parse_url(url)
    except ValueError as exc:
        raise HubConfigError(
            "redis_url", f"--redis {shown!r} is not a Redis URL (redis://host:port/db): {exc}"
        ) from None
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss") and not _DB_PATH.fullmatch(parts.path):
        raise HubConfigError(
            "redis_url",
            f"--redis {shown!r}: the path {parts.path!r} is not a database number: give "
            "redis://host:port/0 (a number from 0, or no path for database 0)",
        )


def redis_refusal(exc: BaseException, url: str) -> HubConfigError | None:
    """The configuration error ``exc`` (raised connecting to ``url``) shows, else ``None``.

    Pure: classifies a redis-py error. Permanent refusals, which waiting for the server
    would not change:

    - ``redis_auth``: the server wants a password and got none, or refused the one given
      (``NOAUTH``, ``WRONGPASS``, ``invalid username-password pair``), or the user lacks
      a permission (``NOPERM``);
    - ``redis_url``: the server has no database of the URL's number (``DB index is out
      of range``).

    Everything else (refused, reset, timed out, still loading) is ``None``: a Redis that
    is not up yet. The message names the server without its password.
    """
    shown = safe_redis_url(url)
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, NoPermissionError):
        return HubConfigError(
            "redis_auth",
            f"the Redis user of {shown} lacks a permission the hub needs ({reason}): let it "
            "run every command on the keys and channels crdt:* (ACL SETUSER)",
        )
    auth = isinstance(exc, AuthenticationError) or (
        isinstance(exc, ResponseError) and reason.upper().startswith(("NOAUTH", "WRONGPASS"))
    )
    if auth:
        if not _has_password(url):
            return HubConfigError(
                "redis_auth",
                f"Redis at {shown} requires a password ({reason}): give it in --redis "
                "(redis://:PASSWORD@host:port/db, or redis://USER:PASSWORD@... for an ACL user)",
            )
        return HubConfigError(
            "redis_auth",
            f"Redis at {shown} refused the hub's user name or password ({reason}): "
            "correct them in --redis",
        )
    if isinstance(exc, ResponseError) and "db index" in reason.lower():
        return HubConfigError(
            "redis_url",
            f"Redis at {shown} has no database of that number ({reason}): its databases "
            "are numbered from 0 up to its 'databases' setting less one (0-15 by default)",
        )
    return None


def check_postgres_dsn(dsn: str) -> None:
    """Refuse a PostgreSQL DSN psycopg cannot parse (``key=value ...`` or ``postgresql://``).

    Raises:
        HubConfigError: code ``postgres_dsn``. The message does not quote the DSN (it
            cannot be parsed, so its password cannot be told apart).
    """
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise HubConfigError(
            "postgres_dsn",
            "--postgres is not a PostgreSQL connection string: give 'host=H user=U dbname=D'"
            " or postgresql://user@host:port/dbname",
        ) from None


async def probe_postgres(dsn: str, *, timeout: float = 5.0) -> None:
    """Connect to ``dsn`` once, so that a hub that cannot reach it says why at once.

    (A pool only times out, after ``timeout``, with no reason.)

    Raises:
        ClusterUnavailable: ``server`` ``"postgres"``; the message names the server (no
            password) and the server's or libpq's reason: refused, unknown host, no such
            database, authentication failed.
    """
    try:
        conn = await AsyncConnection.connect(dsn, connect_timeout=max(2, round(timeout)))
    except psycopg.Error as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ClusterUnavailable(
            "postgres", f"cannot connect to PostgreSQL at {safe_dsn(dsn)}: {reason}"
        ) from exc
    await conn.close()


def _has_password(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.password is not None or any(
            key == "password" for key, _ in parse_qsl(parts.query)
        )
    except ValueError:
        return True


async def probe_redis(
    client: Redis, url: str | None = None, space: KeySpace = DEFAULT_SPACE
) -> str | None:
    """Why ``client``'s Redis does not answer, or ``None`` when it does.

    Answering is a ``PING``, then the kinds of command the hub runs (a read, a stream
    read, a write expiring in a second, a script) on a key of the cluster's key ``space``
    (part ``ping`` of a room of its own, :data:`PROBE_ROOM`).

    Raises:
        HubConfigError: with ``url`` (the client's), when the server refuses the hub for
            good (:func:`redis_refusal`: ``redis_auth``, ``redis_url``).
    """
    try:
        await client.ping()
        # a user the server's ACL limits (key patterns, commands) answers PING and then
        # refuses every room's commands: try the kinds the hub uses on a key of its own
        key = space.key(PROBE_ROOM, "ping")
        await client.exists(key)
        await client.xrevrange(key, count=1)
        await client.set(key, b"1", px=1000)
        await client.eval("return 1", 0)
    except (RedisError, OSError) as exc:
        refusal = redis_refusal(exc, url) if url is not None else None
        if refusal is not None:
            raise refusal from None
        return str(exc) or type(exc).__name__
    return None


PROBE_ROOM: Final = "crdt-start-probe"
"""The room whose ``ping`` key (no room uses that part) the start probe touches."""
