"""A cluster losing its room owner: real hub processes, SIGKILL and SIGSTOP.

Agents spread over three hubs increment one counter (the ``counter`` policy adds
concurrent increments) as fast as they can; the owner of the room is killed (or paused
past its lease) in the middle. Every merge an agent got acknowledged must be in the final
counter exactly once, and the room must serve again within a few seconds.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from bursts import (
    COUNTER,
    assert_counted_once,
    final_counter,
    owner_of,
    report,
    run_burst,
    wait_for_owner,
)
from cluster_servers import RedisServer
from hub_procs import HubCluster, HubProcess

from sync import connect

pytestmark = pytest.mark.slow


async def test_owner_killed_during_a_burst(
    three_hubs: HubCluster, private_redis: RedisServer, postgres_dsn: str
) -> None:
    room = "burst/kill"
    owner: list[HubProcess] = []

    def kill_owner() -> None:
        found = owner_of(private_redis.url, room, three_hubs)
        assert found is not None
        owner.append(found)
        found.kill()

    burst, killed_at = await run_burst(three_hubs, room, kill_owner)
    survivor = next(h for h in three_hubs.hubs if h is not owner[0])
    new_owner = await wait_for_owner(private_redis.url, room, three_hubs)
    assert new_owner is not owner[0]
    report("owner killed", burst, killed_at)
    await assert_counted_once(burst, [survivor], postgres_dsn, room, continued_after=killed_at)
    with psycopg.connect(postgres_dsn) as conn:
        row = conn.execute("SELECT fence FROM crdt_rooms WHERE room = %s", (room,)).fetchone()
    assert row is not None and row[0] >= 2  # the takeover claimed a new fence
    # the new owner loaded the judge while the dead owner's lease ran out (a missed
    # renewal), and only caught up after its claim
    assert f"room {room!r}: preloaded judge caught up" in new_owner.log.read_text(), (
        three_hubs.logs()
    )


async def test_owner_paused_past_its_lease(
    three_hubs: HubCluster, private_redis: RedisServer, postgres_dsn: str
) -> None:
    room = "burst/pause"
    paused: list[HubProcess] = []

    def pause_owner() -> None:
        found = owner_of(private_redis.url, room, three_hubs)
        assert found is not None
        paused.append(found)
        found.pause()
        try:
            time.sleep(4.0)  # twice the lease: another hub takes the room meanwhile
            taker = owner_of(private_redis.url, room, three_hubs)
            assert taker is not None and taker is not found, "nobody took the room over"
        finally:
            found.resume()

    burst, paused_at = await run_burst(three_hubs, room, pause_owner)
    old = paused[0]
    report("owner paused", burst, paused_at)
    assert old.alive
    for _ in range(100):  # the resumed hub notices on its first turn that its lease is gone
        if "stepping down" in old.tail(200):
            break
        await asyncio.sleep(0.05)
    assert "stepping down" in old.tail(200), old.tail()
    # every hub, the resumed one too, converged
    await assert_counted_once(burst, three_hubs.hubs, postgres_dsn, room, continued_after=paused_at)


async def test_redis_restarted_then_everything_restarted(
    three_hubs: HubCluster, private_redis: RedisServer, postgres_dsn: str
) -> None:
    room = "burst/redis"
    burst, restarted_at = await run_burst(three_hubs, room, private_redis.restart)
    report("redis restarted", burst, restarted_at)
    await assert_counted_once(
        burst, three_hubs.hubs, postgres_dsn, room, continued_after=restarted_at
    )
    # everything down (hubs and Redis, which keeps nothing), then up again: PostgreSQL
    # brings the room back
    three_hubs.stop()
    private_redis.restart()
    three_hubs.start()
    assert await final_counter(three_hubs[1], room) == burst.merges
    async with connect(three_hubs[2].url(room), agent="after", resolvers=COUNTER) as after:
        await after.acommit({"calls": burst.merges + 1}, after.token)
    assert await final_counter(three_hubs[0], room) == burst.merges + 1
