"""A hub's lease renewals in one script call: each lease answered on its own.

Real Redis. Renewals asked for within the window share one call; a lease that is no longer
its token's is refused while the others are extended; keepers renewing through it keep
their leases; a Redis that does not answer fails the renewals (the keepers retry).
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
from redis.asyncio import Redis

from sync.server.cluster import ClusterUnavailable, redis_client
from sync.server.cluster.keeper import LeaseKeeper
from sync.server.cluster.lease import RedisLease, new_token
from sync.server.cluster.renewals import Renewals


async def test_renewals_share_one_call_and_are_answered_each(redis: Redis) -> None:
    renewals = Renewals(redis, window=0.05)
    prefix = f"renew-{secrets.token_hex(4)}"
    leases = [
        RedisLease(redis, f"{prefix}-{n}", new_token("a"), ttl=5, renewals=renewals)
        for n in range(3)
    ]
    try:
        for lease in leases:
            assert await lease.acquire()
        await redis.set(leases[1].key, "someone-else", px=5000)  # taken meanwhile
        await redis.pexpire(leases[0].key, 100)
        answers = await asyncio.gather(*(lease.renew() for lease in leases))
        assert answers == [True, False, True]
        assert renewals.calls == 1
        assert await redis.pttl(leases[0].key) > 4000  # extended by the whole ttl
        assert await redis.get(leases[1].key) == b"someone-else"  # untouched
    finally:
        await renewals.close()
        await redis.delete(*[lease.key for lease in leases])


async def test_keepers_renewing_together_keep_their_leases(redis: Redis) -> None:
    renewals = Renewals(redis, window=0.05)
    prefix = f"renew-keep-{secrets.token_hex(4)}"
    keepers = []
    try:
        for n in range(4):
            lease = RedisLease(redis, f"{prefix}-{n}", new_token("a"), ttl=0.6, renewals=renewals)
            started = asyncio.get_running_loop().time()
            assert await lease.acquire()
            keepers.append(LeaseKeeper(lease, acquired_at=started).start())
        await asyncio.sleep(1.5)  # 2.5 ttls: alive only through the renewals
        assert all(keeper.valid() for keeper in keepers)
        renewed = sum(keeper.renewals for keeper in keepers)
        assert renewed >= 4 * 8
        assert renewals.calls < renewed  # shared calls
    finally:
        for keeper in keepers:
            await keeper.stop()
        await renewals.close()
        await redis.delete(*[keeper.lease.key for keeper in keepers])


async def test_renewals_fail_when_redis_does_not_answer() -> None:
    nowhere = redis_client("redis://127.0.0.1:1", timeout=0.2)  # nothing listens there
    renewals = Renewals(nowhere, window=0.01)
    lease = RedisLease(nowhere, "renew-down", new_token("a"), ttl=1, renewals=renewals)
    try:
        with pytest.raises(ClusterUnavailable):
            await lease.renew()
    finally:
        await renewals.close()
        await nowhere.aclose()
