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


async def test_routine_takes_share_the_renewals_call_and_take_only_free_leases(
    redis: Redis,
) -> None:
    renewals = Renewals(redis, window=0.05)
    prefix = f"take-{secrets.token_hex(4)}"
    held = RedisLease(redis, f"{prefix}-held", new_token("a"), ttl=5, renewals=renewals)
    free = RedisLease(redis, f"{prefix}-free", new_token("b"), ttl=5, renewals=renewals)
    other = RedisLease(redis, f"{prefix}-other", new_token("b"), ttl=5, renewals=renewals)
    forever = RedisLease(redis, f"{prefix}-forever", new_token("b"), ttl=5, renewals=renewals)
    try:
        assert await held.acquire()  # not routine: alone, at once
        assert renewals.calls == 0
        await redis.set(other.key, "someone-else", px=3000)
        await redis.set(forever.key, "someone-else")  # no expiry
        answers = await asyncio.gather(
            held.renew(),
            free.take(routine=True),
            other.take(routine=True),
            forever.take(routine=True),
        )
        assert renewals.calls == 1 and renewals.takes == 3
        assert answers[0] is True
        assert answers[1] is None  # free: taken
        assert await redis.get(free.key) == free.token.encode()
        assert await redis.pttl(free.key) > 4000
        assert isinstance(answers[2], float) and 2.5 < answers[2] <= 3.0  # its holder's left
        assert await redis.get(other.key) == b"someone-else"  # untouched
        assert answers[3] == 0.0  # a key without expiry: no time to give
        assert await free.take(routine=True) is None  # already its own: still its own
    finally:
        await renewals.close()
        await redis.delete(held.key, free.key, other.key, forever.key)


async def test_routine_takes_never_take_a_live_lease_and_take_a_dead_ones(redis: Redis) -> None:
    """A keeper renewing through one hub's calls, a contender trying through another's."""
    ttl = 0.6
    owner_calls = Renewals(redis, window=ttl / 12)
    contender_calls = Renewals(redis, window=ttl / 12)
    room = f"take-live-{secrets.token_hex(4)}"
    lease = RedisLease(redis, room, new_token("owner"), ttl=ttl, renewals=owner_calls)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await lease.acquire()
    keeper = LeaseKeeper(lease, acquired_at=started).start()
    contender = RedisLease(redis, room, new_token("contender"), ttl=ttl, renewals=contender_calls)
    try:
        for _ in range(int(3 * ttl / (ttl / 3))):  # three ttls of attempts every ttl/3
            left = await contender.take(routine=True)
            assert left is not None and left > 0, "a live owner's lease was taken"
            await asyncio.sleep(ttl / 3)
        assert keeper.valid() and keeper.renewals >= 12
        await keeper.stop()  # the owner dies: no more renewals, no release
        died = loop.time()
        while (left := await contender.take(routine=True)) is not None:
            assert loop.time() - died < ttl + 2 * ttl / 12 + 0.2, "the dead lease was never taken"
            await asyncio.sleep(min(ttl / 3, left + 0.005))
        assert await lease.holder() == contender.token
        assert contender_calls.takes >= 10
    finally:
        await keeper.stop()
        await owner_calls.close()
        await contender_calls.close()
        await redis.delete(lease.key)
