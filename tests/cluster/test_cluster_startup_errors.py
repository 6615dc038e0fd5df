"""A Redis that refuses the hub for good stops its start; one that is only down does not.

Found trying the cluster as a user: ``--redis redis://127.0.0.1:6379/99`` (no database
99) logged "does not answer (DB index is out of range): serving once it does", kept
running and answered every client 1011 with a traceback each; a wrong or missing
password waited forever; ``redis://host:6379/abc`` silently used database 0. Now a
refused password or user (``redis_auth``) and a database the server does not have
(``redis_url``) are :class:`HubConfigError` at start (exit status 2 on the command line,
no password in the message), and a URL path that is not a database number is refused
before connecting. A Redis that is simply down is still waited for
(``test_cluster_config_errors.py``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
import redis as redis_sync
from cluster_servers import RedisServer, free_port
from hub_procs import start_refused
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    NoPermissionError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sync import Hub, HubConfigError
from sync.server.cluster.clients import check_redis_url, redis_refusal, safe_redis_url
from sync.server.cluster.schema import cluster_id, migrate

PASSWORD = "s3cret-word"


@pytest.fixture
def locked_redis(private_redis: RedisServer) -> Iterator[RedisServer]:
    """The test's private Redis, requiring :data:`PASSWORD` (set once it runs)."""
    with redis_sync.Redis(port=private_redis.port, socket_timeout=3) as client:
        client.config_set("requirepass", PASSWORD)
    yield private_redis


def url(server: RedisServer, *, password: str | None = None, db: str = "0") -> str:
    auth = f":{password}@" if password is not None else ""
    return f"redis://{auth}127.0.0.1:{server.port}/{db}"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/abc",
        "redis://127.0.0.1:6379/0/1",
        "redis://127.0.0.1:6379/-1",
        "rediss://127.0.0.1:6380/db1",
        f"redis://:{PASSWORD}@127.0.0.1:6379/x",
    ],
)
def test_a_path_that_is_not_a_database_number_is_refused(url: str) -> None:
    with pytest.raises(HubConfigError) as info:
        check_redis_url(url)
    assert info.value.code == "redis_url" and "not a database number" in str(info.value)
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379",
        "redis://127.0.0.1:6379/",
        "redis://127.0.0.1:6379/15",
        "rediss://h:6380/2?ssl_cert_reqs=none",
        "unix:///tmp/redis.sock?db=3",
    ],
)
def test_database_numbers_and_no_path_pass(url: str) -> None:
    check_redis_url(url)


def test_a_password_in_the_query_is_masked_too() -> None:
    shown = safe_redis_url(f"redis://127.0.0.1:6379/0?password={PASSWORD}&db=1")
    assert PASSWORD not in shown and "password=***" in shown and "db=1" in shown


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (AuthenticationError("invalid username-password pair or user is disabled."), "redis_auth"),
        (ResponseError("NOAUTH Authentication required."), "redis_auth"),
        (ResponseError("WRONGPASS invalid username-password pair"), "redis_auth"),
        (NoPermissionError("NOPERM this user has no permissions to run 'ping'"), "redis_auth"),
        (ResponseError("DB index is out of range"), "redis_url"),
        (RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."), None),
        (RedisTimeoutError("Timeout connecting to server"), None),
        (BusyLoadingError("Redis is loading the dataset in memory"), None),
        (ConnectionResetError(104, "Connection reset by peer"), None),
    ],
)
def test_what_waiting_cannot_fix_is_a_config_error(error: Exception, code: str | None) -> None:
    refusal = redis_refusal(error, f"redis://:{PASSWORD}@127.0.0.1:6379/0")
    assert (refusal.code if refusal is not None else None) == code
    if refusal is not None:
        assert "redis://:***@127.0.0.1:6379/0" in str(refusal)
        assert PASSWORD not in str(refusal)


async def test_a_missing_password_is_refused_at_start(
    locked_redis: RedisServer, postgres_dsn: str
) -> None:
    error = await start_refused(url(locked_redis), postgres_dsn)
    assert error.code == "redis_auth" and "requires a password" in str(error)


async def test_a_wrong_password_is_refused_without_showing_it(
    locked_redis: RedisServer, postgres_dsn: str
) -> None:
    error = await start_refused(url(locked_redis, password=PASSWORD[::-1]), postgres_dsn)
    assert error.code == "redis_auth" and "refused" in str(error)
    assert PASSWORD[::-1] not in str(error) and ":***@127.0.0.1" in str(error)


async def test_the_right_password_starts(locked_redis: RedisServer, postgres_dsn: str) -> None:
    async with Hub(port=0, redis=url(locked_redis, password=PASSWORD), postgres=postgres_dsn):
        pass


async def test_a_database_the_server_lacks_is_refused_at_start(
    private_redis: RedisServer, postgres_dsn: str
) -> None:
    error = await start_refused(url(private_redis, db="99"), postgres_dsn)
    assert error.code == "redis_url" and "DB index is out of range" in str(error)


@pytest.mark.parametrize(
    "rules",
    [
        ["~app:*", "+@all"],  # keys of another application only
        ["~*", "+ping", "+hello", "+auth"],  # no command but the handshake's
    ],
    ids=["other-keys", "ping-only"],
)
async def test_a_user_the_acl_limits_is_refused_at_start(
    private_redis: RedisServer, postgres_dsn: str, rules: list[str]
) -> None:
    """It answered PING, started, and served every client 1011 (NOPERM on each room)."""
    with redis_sync.Redis(port=private_redis.port, socket_timeout=3) as client:
        client.acl_setuser("app", enabled=True, passwords=["+apw"], reset_keys=True)
        client.execute_command("ACL", "SETUSER", "app", *rules)
    limited = f"redis://app:apw@127.0.0.1:{private_redis.port}/0"
    error = await start_refused(limited, postgres_dsn)
    assert error.code == "redis_auth" and "apw" not in str(error)


async def _cluster_id(postgres_dsn: str) -> str:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await migrate(conn)
        return await cluster_id(conn)


async def test_a_user_the_acl_limits_to_its_clusters_keys_starts(
    private_redis: RedisServer, postgres_dsn: str
) -> None:
    """The start probe touches a key of the cluster's own key space, not of the default one."""
    own = await _cluster_id(postgres_dsn)
    with redis_sync.Redis(port=private_redis.port, socket_timeout=3) as client:
        for user, space in (("mine", own), ("theirs", "another-cluster")):
            client.acl_setuser(user, enabled=True, passwords=["+apw"], reset_keys=True)
            client.execute_command(
                "ACL", "SETUSER", user, f"~crdt:{space}:*", f"&crdt:{space}:*", "+@all"
            )
    limited = f"redis://mine:apw@127.0.0.1:{private_redis.port}/0"
    async with Hub(port=0, redis=limited, postgres=postgres_dsn, secret="s" * 32) as hub:
        assert hub.port > 0
    other = f"redis://theirs:apw@127.0.0.1:{private_redis.port}/0"
    error = await start_refused(other, postgres_dsn)
    assert error.code == "redis_auth"


def run_hub(redis: str, postgres: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sync.cli", "hub", "--insecure", "--port", str(free_port()),
         "--redis", redis, "--postgres", postgres],
        capture_output=True, text=True, timeout=20,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("password", "db", "code"),
    [(None, "0", "redis_auth"), ("wrong-word", "0", "redis_auth"), (PASSWORD, "99", "redis_url")],
)
def test_the_hub_command_exits_2_naming_the_refusal(
    locked_redis: RedisServer, postgres_dsn: str, password: str | None, db: str, code: str
) -> None:
    done = run_hub(url(locked_redis, password=password, db=db), postgres_dsn)
    assert done.returncode == 2, done.stderr
    assert f"({code})" in done.stderr and "Traceback" not in done.stderr
    assert PASSWORD not in done.stderr and "wrong-word" not in done.stderr


def test_the_hub_command_refuses_a_path_that_is_not_a_database(postgres_dsn: str) -> None:
    done = run_hub("redis://127.0.0.1:6379/abc", postgres_dsn)
    assert done.returncode == 2 and "(redis_url)" in done.stderr, done.stderr
