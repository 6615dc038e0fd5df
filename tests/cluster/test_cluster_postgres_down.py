"""PostgreSQL crashed and restarted under a cluster: a transient outage, told as one.

A private PostgreSQL server of the test's own (``postgres_server.py``), crashed with an
immediate shutdown (every session cut, no checkpoint) and started again on the same
files. Found trying it as a user (two hubs, one agent merging in a loop):

- a hub opening a room for a connection while PostgreSQL was down closed it with 1011
  (internal error, a traceback in its log), which a client counts against its oldest
  unanswered merge (three and the merge fails): now 1013 (try again later), as for Redis;
- a contender's fence claim waited the pool's 5 s for a connection while holding a fresh
  lease of 1.5 s (a traceback, then "claim outlived the fresh lease"): it now waits no
  longer than the lease and is told as PostgreSQL not answering.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from bursts import assert_counted_once, report, run_burst
from cluster_servers import RedisServer
from hub_procs import HubCluster
from outages import assert_try_again_later
from postgres_server import PostgresServer

import sync
from crdt_state import Retry, SharedState
from crdt_state.postgres import open_postgres
from sync import Hub

FAST = Retry(attempts=1, base_delay=0.01, max_delay=0.05)
ROOM = "pg-outage"


@pytest.fixture
async def pg_hubs(
    private_redis: RedisServer, private_postgres: PostgresServer
) -> AsyncIterator[tuple[Hub, Hub]]:
    dsn = private_postgres.dsn
    async with (
        Hub(port=0, redis=private_redis.url, postgres=dsn) as a,
        Hub(port=0, redis=private_redis.url, postgres=dsn) as b,
    ):
        yield a, b


async def test_a_room_opened_while_postgres_is_down_is_try_again_later(
    pg_hubs: tuple[Hub, Hub], private_postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    _, b = pg_hubs
    await asyncio.to_thread(private_postgres.crash)
    await assert_try_again_later(b.url("never-opened"), caplog, "postgres did not answer")


async def test_merges_go_on_through_a_postgres_crash_and_restart(
    pg_hubs: tuple[Hub, Hub], private_postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent merges through the outage; nothing fails, nothing is lost or doubled,
    the room is served again soon after PostgreSQL is back, and PostgreSQL holds it all."""
    a, b = pg_hubs
    caplog.set_level(logging.WARNING)
    async with sync.connect(
        [a.url(ROOM), b.url(ROOM)], agent="w", reconnect=FAST, timeout=10
    ) as remote:
        for _ in range(20):  # the room is owned and serving
            async with remote.fork() as branch:
                branch["n"] = branch.get("n", 0) + 1
        await remote.wait_idle(10)
        await asyncio.to_thread(private_postgres.crash)
        down_at = time.monotonic()

        async def restart_later() -> float:
            await asyncio.sleep(2.0)  # longer than the lease: the owner steps down
            await asyncio.to_thread(private_postgres.start)
            return time.monotonic()

        restarter = asyncio.create_task(restart_later())
        pending, end = 0, 20
        while not restarter.done():  # merging on: queued while the room is not served
            branch = remote.fork()
            branch[f"k{end}"] = end
            pending += (await branch.amerge()).pending
            end += 1
            await asyncio.sleep(0.01)
        back_at = restarter.result()
        assert pending, "no merge waited for the outage"
        await remote.wait_idle(60)
        served_again = time.monotonic() - back_at
        assert remote.failed == [] and remote.conflicted == []
        expected = {"n": 20, **{f"k{i}": i for i in range(20, end)}}
        assert remote.snapshot() == expected
    print(
        f"outage {back_at - down_at:.2f} s, {pending} merges queued; all acknowledged "
        f"{served_again:.2f} s after PostgreSQL was back"
    )
    assert served_again < 10, served_again
    async with sync.connect(b.url(ROOM), agent="reader", timeout=10) as reader:
        assert reader.snapshot() == expected
    stored: SharedState = await asyncio.to_thread(
        open_postgres, private_postgres.dsn, ROOM, read_only=True
    )
    try:
        assert stored.snapshot() == expected  # durable, not only in the hubs' memory
    finally:
        stored.close()
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert tracebacks == [] and "internal error" not in caplog.text


@pytest.fixture
def pg_cluster(
    private_redis: RedisServer, private_postgres: PostgresServer, tmp_path: Path
) -> Iterator[HubCluster]:
    with HubCluster(private_redis.url, private_postgres.dsn, tmp_path, 3) as cluster:
        yield cluster
        print(cluster.logs())


@pytest.mark.slow
async def test_postgres_crashed_during_a_burst_loses_and_doubles_nothing(
    pg_cluster: HubCluster, private_postgres: PostgresServer
) -> None:
    """Six agents on three hub processes increment one counter; PostgreSQL crashes (commits
    in flight: some made it, their answers did not) and is back 2 s later. Every merge made
    is counted exactly once, on every hub and in PostgreSQL."""
    room = "burst/postgres"

    def crash_and_restart() -> None:
        private_postgres.crash()
        time.sleep(2.0)
        private_postgres.start()

    burst, crashed_at = await run_burst(pg_cluster, room, crash_and_restart)
    report("postgres crashed", burst, crashed_at)
    dsn = private_postgres.dsn
    await assert_counted_once(burst, pg_cluster.hubs, dsn, room, continued_after=crashed_at)
    for hub in pg_cluster.hubs:  # an outage is told in a line, not a traceback
        text = hub.log.read_text()
        assert "Traceback" not in text and "internal error" not in text, hub.tail()
