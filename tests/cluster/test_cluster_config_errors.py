"""A hub given server addresses it cannot use says so at start: typed errors, no password.

The mistakes a user makes starting a cluster hub: a URL that is not Redis's, a DSN that
is not PostgreSQL's, a PostgreSQL that refuses or lacks the database, a Redis that is not
up yet. The first two are refused as configuration (``HubConfigError``, exit code 2 on
the command line), the next as ``ClusterUnavailable`` with the server's own reason (exit
code 1), the last only logged: the hub serves its rooms once Redis answers.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import pytest
from hubs import free_port

from sync import Hub, HubConfigError
from sync.server.cluster import ClusterUnavailable
from sync.server.cluster.clients import check_postgres_dsn, check_redis_url, safe_redis_url

SECRET_WORD = "s3cret-word"


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379/0", "127.0.0.1:6379", "redis://h:x/0"])
def test_a_url_that_is_not_redis_is_a_config_error(url: str) -> None:
    with pytest.raises(HubConfigError) as info:
        check_redis_url(url)
    assert info.value.code == "redis_url" and repr(url) in str(info.value)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://h:6380/1", "unix:///tmp/redis.sock"]
)
def test_redis_urls_pass(url: str) -> None:
    check_redis_url(url)


def test_a_redis_password_is_masked_in_messages() -> None:
    assert safe_redis_url(f"redis://:{SECRET_WORD}@h:1/0") == "redis://:***@h:1/0"
    assert safe_redis_url(f"redis://ann:{SECRET_WORD}@h/0") == "redis://ann:***@h/0"
    assert safe_redis_url("redis://h:1/0") == "redis://h:1/0"
    with pytest.raises(HubConfigError) as info:
        check_redis_url(f"http://:{SECRET_WORD}@h:1/0")
    assert SECRET_WORD not in str(info.value)


def test_a_dsn_that_is_not_postgres_is_a_config_error_without_quoting_it() -> None:
    with pytest.raises(HubConfigError) as info:
        check_postgres_dsn(f"garbage password={SECRET_WORD}")
    assert info.value.code == "postgres_dsn" and SECRET_WORD not in str(info.value)
    check_postgres_dsn("host=127.0.0.1 user=postgres dbname=postgres")
    check_postgres_dsn("postgresql://postgres@127.0.0.1:5432/postgres")


async def test_a_postgres_that_refuses_fails_the_start_with_its_reason(redis_url: str) -> None:
    dsn = f"host=127.0.0.1 port={free_port()} user=ann password={SECRET_WORD} dbname=rooms"
    hub = Hub(port=0, redis=redis_url, postgres=dsn)
    with pytest.raises(ClusterUnavailable) as info:
        await hub.start()
    error = info.value
    assert error.details["server"] == "postgres" and "refused" in error.message.lower()
    assert "postgresql://ann@127.0.0.1" in error.message and SECRET_WORD not in str(error)
    await hub.stop()


async def test_a_missing_database_is_named(redis_url: str, throwaway_postgres: str) -> None:
    dsn = throwaway_postgres.replace("dbname=", "dbname=no_such_") + " connect_timeout=5"
    hub = Hub(port=0, redis=redis_url, postgres=dsn)
    with pytest.raises(ClusterUnavailable) as info:
        await hub.start()
    assert "does not exist" in info.value.message
    await hub.stop()


async def test_a_redis_not_up_yet_is_logged_and_the_hub_starts(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://:{SECRET_WORD}@127.0.0.1:{free_port()}/0"
    caplog.set_level(logging.WARNING, logger="crdt_state.cluster")
    async with Hub(port=0, redis=url, postgres=postgres_dsn) as hub:
        assert hub.port > 0
    warned = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    assert warned and "redis://:***@127.0.0.1" in warned[0]
    assert all(SECRET_WORD not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("redis", "postgres", "code", "status"),
    [
        ("http://127.0.0.1:6379/0", "host=127.0.0.1 user=postgres", "redis_url", 2),
        ("redis://127.0.0.1:6379/0", "garbage", "postgres_dsn", 2),
        (
            "redis://127.0.0.1:6379/0",
            "host=127.0.0.1 port=1 user=postgres",
            "cluster_unavailable",
            1,
        ),
    ],
)
def test_the_hub_command_prints_the_mistake_not_a_traceback(
    redis: str, postgres: str, code: str, status: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sync.cli", "hub", "--insecure", "--port", str(free_port()),
         "--redis", redis, "--postgres", postgres],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == status, done.stderr
    assert f"({code})" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "options",
    [{"redis": "redis://127.0.0.1:6379/0"}, {"postgres": "host=127.0.0.1 user=postgres"}],
)
def test_redis_and_postgres_go_together(options: dict[str, Any]) -> None:
    with pytest.raises(HubConfigError) as info:
        Hub(port=0, **options)
    assert info.value.code == "cluster_options" and isinstance(info.value, ValueError)
