"""A cluster hub's ``/readyz`` reports Redis and PostgreSQL, never its unused ``--db``.

Found trying the cluster as a user: ``/readyz`` of a cluster hub checked the ``--db``
directory, which a cluster hub does not use: ready (200) while Redis or PostgreSQL was
down and every client got 1013, not ready when ``--db`` pointed somewhere unwritable
though the hub served fine, and the first call created ``./hub.db/``. Now it is a
``PING`` to Redis and a pooled ``SELECT 1`` to PostgreSQL, each bounded, under the
problems ``redis`` and ``postgres`` (same JSON as before).

Hubs in this process; the PostgreSQL that stops answering is the machine's behind a
:class:`~tcp_proxy.TcpProxy` the test pauses.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_servers import RedisServer
from psycopg.conninfo import make_conninfo
from tcp_proxy import TcpProxy

from sync import Hub


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status), bytes(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


async def readyz(hub: Hub) -> tuple[int, dict[str, Any], float]:
    """``/readyz``: its status, its JSON and the seconds it took."""
    started = time.monotonic()
    status, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{hub.port}/readyz")
    return status, json.loads(body), time.monotonic() - started


async def until_ready(hub: Hub, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status, answer, _ = await readyz(hub)
        if status == 200 or time.monotonic() > deadline:
            assert status == 200, answer
            return answer
        await asyncio.sleep(0.2)


@pytest.fixture
async def proxied_hub(
    private_redis: RedisServer, postgres_dsn: str, pg_proxy: TcpProxy
) -> AsyncIterator[Hub]:
    dsn = make_conninfo(postgres_dsn, host="127.0.0.1", port=str(pg_proxy.port))
    async with Hub(port=0, redis=private_redis.url, postgres=dsn) as hub:
        try:
            yield hub
        finally:
            pg_proxy.resume()  # the hub's stop hands its rooms over through it


async def test_a_cluster_hub_never_touches_its_db(
    private_redis: RedisServer,
    postgres_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.chdir(tmp_path)
    for db in (blocker / "rooms", "hub.db"):  # unwritable; the command's default
        async with Hub(port=0, db=db, redis=private_redis.url, postgres=postgres_dsn) as hub:
            status, answer, _ = await readyz(hub)
            assert (status, answer) == (200, {"ready": True, "problems": {}})
            assert hub.db is None
    assert not (tmp_path / "hub.db").exists()


async def test_redis_down_is_not_ready(private_redis: RedisServer, postgres_dsn: str) -> None:
    async with Hub(port=0, redis=private_redis.url, postgres=postgres_dsn) as hub:
        await until_ready(hub)
        private_redis.kill()
        status, answer, took = await readyz(hub)
        assert status == 503 and answer["ready"] is False, answer
        assert set(answer["problems"]) == {"redis"}
        assert f"redis at {private_redis.url}" in answer["problems"]["redis"]
        assert took < 5
        await asyncio.to_thread(private_redis.start)
        await until_ready(hub)


async def test_postgres_not_answering_is_not_ready(proxied_hub: Hub, pg_proxy: TcpProxy) -> None:
    await until_ready(proxied_hub)
    pg_proxy.pause()
    status, answer, took = await readyz(proxied_hub)
    assert status == 503 and set(answer["problems"]) == {"postgres"}, answer
    assert "(SELECT 1) did not answer within" in answer["problems"]["postgres"]
    assert took < 5  # bounded: a probe's own timeout is 1 s or so
    pg_proxy.resume()
    await until_ready(proxied_hub)


async def test_postgres_down_is_not_ready(proxied_hub: Hub, pg_proxy: TcpProxy) -> None:
    await until_ready(proxied_hub)
    pg_proxy.stop()  # connections cut, new ones refused
    status, answer, took = await readyz(proxied_hub)
    assert status == 503 and set(answer["problems"]) == {"postgres"}, answer
    assert took < 5
