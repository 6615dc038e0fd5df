"""The Redis lease and its keeper, against real Redis servers."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from typing import Any

import pytest
from bounded import bounded
from cluster_servers import RedisServer
from redis.asyncio import Redis

from sync.server.cluster import (
    KeySpace,
    LeaseKeeper,
    LeaseLost,
    LossReason,
    RedisLease,
    lease_deadline,
    lease_holder,
    new_token,
    redis_client,
    room_key,
)


def new_room() -> str:
    return f"lease-{secrets.token_hex(4)}"


async def test_only_one_token_holds_a_lease_and_only_it_renews_or_releases(redis: Redis) -> None:
    room = new_room()
    mine = RedisLease(redis, room, new_token("a"), ttl=5)
    theirs = RedisLease(redis, room, new_token("b"), ttl=5)
    assert await mine.acquire()
    assert not await theirs.acquire()
    assert await lease_holder(redis, room) == mine.token
    assert await redis.get(f"crdt:{{{room}}}:owner") == mine.token.encode()  # hash tag
    remaining = await mine.remaining()
    assert remaining is not None and 4 < remaining <= 5
    assert not await theirs.renew()
    assert not await theirs.release()
    assert await mine.holder() == mine.token
    assert await mine.renew()
    assert await mine.release()
    assert await lease_holder(redis, room) is None
    assert await mine.remaining() is None
    assert not await mine.renew()  # gone: a lost lease is never re-created by renewing
    assert await redis.exists(room_key(room, "owner")) == 0


async def test_leases_of_one_room_in_two_key_spaces_are_two_leases(redis: Redis) -> None:
    room, x, y = new_room(), KeySpace("lease-x"), KeySpace("lease-y")
    mine = RedisLease(redis, room, new_token("a"), ttl=5, space=x)
    theirs = RedisLease(redis, room, new_token("b"), ttl=5, space=y)
    try:
        assert await mine.acquire() and await theirs.acquire()  # neither sees the other
        assert mine.key == f"crdt:lease-x:{{{room}}}:owner"
        assert await lease_holder(redis, room, x) == await mine.holder() == mine.token
        assert await lease_holder(redis, room, y) == await theirs.holder() == theirs.token
        assert await lease_holder(redis, room) is None
    finally:
        await redis.delete(mine.key, theirs.key)


async def test_an_expired_lease_cannot_be_renewed_and_is_free(redis: Redis) -> None:
    room = new_room()
    old = RedisLease(redis, room, new_token("a"), ttl=0.05)
    assert await old.acquire()
    await asyncio.sleep(0.1)
    assert not await old.renew()
    new = RedisLease(redis, room, new_token("b"), ttl=5)
    assert await new.acquire()
    assert not await old.release()
    assert await lease_holder(redis, room) == new.token
    await new.release()


async def test_an_acquire_whose_answer_was_lost_counts(redis: Redis) -> None:
    room = new_room()
    lease = RedisLease(redis, room, new_token("a"), ttl=5)
    await redis.set(lease.key, lease.token, px=5000)  # as if SET NX was applied, reply lost
    assert await lease.acquire()
    await lease.release()


async def test_the_keeper_keeps_the_lease_alive_until_stopped(redis: Redis) -> None:
    room = new_room()
    lease = RedisLease(redis, room, new_token("a"), ttl=0.3)
    started = time.monotonic()
    assert await lease.acquire()
    keeper = LeaseKeeper(lease, acquired_at=started).start()
    await asyncio.sleep(1.2)  # four ttls
    assert keeper.valid() and not keeper.lost.is_set()
    assert keeper.renewals >= 16  # every ttl/6 (24 in 1.2 s on an idle machine)
    assert await lease_holder(redis, room) == lease.token
    await keeper.stop()
    assert not keeper.valid()
    await asyncio.sleep(0.4)
    assert await lease_holder(redis, room) is None  # not renewed any more: it expired
    assert keeper.loss is None  # stopping is not a loss


async def test_the_keeper_reports_a_taken_lease_at_its_next_renewal(redis: Redis) -> None:
    room = new_room()
    lease = RedisLease(redis, room, new_token("a"), ttl=0.6)
    losses: list[LeaseLost] = []
    started = time.monotonic()
    assert await lease.acquire()
    keeper = LeaseKeeper(lease, acquired_at=started, on_lost=losses.append).start()
    await asyncio.sleep(0.1)
    other = new_token("b")
    await redis.set(lease.key, other, px=5000)  # someone else's now
    taken_at = time.monotonic()
    await asyncio.wait_for(keeper.lost.wait(), 1.0)
    assert time.monotonic() - taken_at < 0.2 + 0.15  # one renewal interval, plus slack
    assert [loss.reason for loss in losses] == [LossReason.TAKEN]
    assert keeper.loss is losses[0] and keeper.loss.code == "lease_lost"
    assert not keeper.valid()
    await asyncio.sleep(0.5)
    assert len(losses) == 1
    assert await lease_holder(redis, room) == other  # the keeper never touched it
    await keeper.stop()


async def test_the_keeper_reports_expiry_when_redis_hangs(private_redis: RedisServer) -> None:
    """Redis paused (SIGSTOP): no answer at all; the loss comes by the local deadline."""
    client = redis_client(private_redis.url, timeout=5.0)  # longer than the ttl on purpose
    try:
        lease = RedisLease(client, "hang", new_token("a"), ttl=0.6)
        losses: list[LeaseLost] = []
        started = time.monotonic()
        assert await lease.acquire()
        keeper = LeaseKeeper(lease, acquired_at=started, on_lost=losses.append).start()
        await asyncio.sleep(0.3)
        private_redis.pause()
        deadline = keeper.valid_until
        await asyncio.wait_for(keeper.lost.wait(), 2.0)
        late = time.monotonic() - deadline
        assert -0.05 < late < 0.3, late
        assert [loss.reason for loss in losses] == [LossReason.EXPIRED]
        renewals = keeper.renewals
        private_redis.resume()
        await asyncio.sleep(0.3)
        assert keeper.renewals == renewals  # nothing after the loss
        await keeper.stop()
    finally:
        private_redis.resume()
        await client.aclose()


class StubLease:
    """A lease whose renewals answer from a script, for the keeper's timing alone."""

    def __init__(self, ttl: float, answers: list[Any]) -> None:
        self.room, self.token, self.key = "stub", "stub#1", "crdt:{stub}:owner"
        self.ttl = ttl
        self.answers = answers
        self.renew_calls: list[float] = []
        self.releases = 0

    async def renew(self) -> bool:
        self.renew_calls.append(time.monotonic())
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)

    async def release(self) -> bool:
        self.releases += 1
        return True


async def test_a_process_resumed_past_its_deadline_reports_expiry_without_renewing() -> None:
    """A jump of the clock (what SIGSTOP looks like from inside) ends the lease at once."""
    offset = [0.0]

    def clock() -> float:
        return time.monotonic() + offset[0]

    lease = StubLease(0.6, [])
    keeper = LeaseKeeper(lease, acquired_at=clock(), clock=clock).start()  # type: ignore[arg-type]
    await asyncio.sleep(0.5)
    calls = len(lease.renew_calls)
    assert calls >= 2 and keeper.valid()
    offset[0] = 5.0  # "paused" for five seconds
    assert not keeper.valid()  # known without waiting for the keeper's turn
    await asyncio.wait_for(keeper.lost.wait(), 0.5)
    assert keeper.loss is not None and keeper.loss.reason is LossReason.EXPIRED
    assert len(lease.renew_calls) == calls  # never renewed past the deadline
    assert lease.releases == 1  # freed the key for a successor, if still ours
    await keeper.stop()


async def test_failed_renewals_are_retried_until_the_deadline() -> None:
    failures = [ConnectionError("down")] * 3
    lease = StubLease(0.6, [*failures])
    started = time.monotonic()
    keeper = LeaseKeeper(lease, acquired_at=started).start()  # type: ignore[arg-type]
    await asyncio.sleep(0.7)  # past the first ttl: only the retries kept it
    assert keeper.failures == 3 and keeper.renewals >= 1
    assert keeper.valid() and keeper.valid_until > lease_deadline(started, 0.6)
    await keeper.stop()

    lease = StubLease(0.6, [ConnectionError("down")] * 100)
    started = time.monotonic()
    keeper = LeaseKeeper(lease, acquired_at=started).start()  # type: ignore[arg-type]
    await asyncio.wait_for(keeper.lost.wait(), 1.0)
    assert keeper.loss is not None and keeper.loss.reason is LossReason.EXPIRED
    assert time.monotonic() - lease_deadline(started, 0.6) < 0.1
    assert len(lease.renew_calls) >= 4  # retried every ttl/10 after the first failure


class CancelLosingLease(StubLease):
    """Renewals that lose a cancellation, as Python 3.11's ``asyncio.wait_for`` does.

    redis-py sends every command through ``wait_for``; when a cancellation arrives as the
    write completes, 3.11 returns the result and the cancellation is gone.
    """

    def __init__(self, ttl: float) -> None:
        super().__init__(ttl, [])
        self.in_flight = asyncio.Event()

    async def renew(self) -> bool:
        self.renew_calls.append(time.monotonic())
        self.in_flight.set()
        with contextlib.suppress(asyncio.CancelledError):  # lost, as by wait_for
            await asyncio.sleep(0.05)
        self.in_flight.clear()
        return True


async def test_stopping_a_keeper_ends_it_even_when_a_renewal_loses_the_cancellation() -> None:
    """The hang of a stopped keeper renewing forever (and its owner's stop() never returning)."""
    lease = CancelLosingLease(0.3)
    keeper = LeaseKeeper(lease, acquired_at=time.monotonic()).start()  # type: ignore[arg-type]
    async with bounded(2, "a renewal in flight"):
        await lease.in_flight.wait()
    began = time.monotonic()
    async with bounded(5, "keeper.stop() while a renewal loses its cancellation"):
        await keeper.stop()
    assert time.monotonic() - began < 1.0  # the renewal in flight, not renewals forever
    calls = len(lease.renew_calls)
    await asyncio.sleep(0.4)  # more than three renewal intervals
    assert len(lease.renew_calls) == calls  # stopped for good
    assert keeper.loss is None and not keeper.valid()


async def test_stopping_a_keeper_does_not_swallow_the_callers_cancellation() -> None:
    lease = CancelLosingLease(0.3)
    keeper = LeaseKeeper(lease, acquired_at=time.monotonic()).start()  # type: ignore[arg-type]
    await lease.in_flight.wait()
    stopping = asyncio.create_task(keeper.stop())
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await asyncio.sleep(0.2)
    calls = len(lease.renew_calls)
    await asyncio.sleep(0.3)
    assert len(lease.renew_calls) == calls  # and the keeper ended all the same


async def test_stopping_a_sleeping_keeper_returns_at_once() -> None:
    lease = StubLease(30.0, [])
    keeper = LeaseKeeper(lease, acquired_at=time.monotonic()).start()  # type: ignore[arg-type]
    await asyncio.sleep(0.05)  # asleep until its first renewal, 10 s from now
    began = time.monotonic()
    await keeper.stop()
    assert time.monotonic() - began < 0.5 and lease.renew_calls == []


@pytest.mark.parametrize("ttl", [0.0, 0.005, -1.0])
def test_a_lease_needs_a_usable_ttl(ttl: float) -> None:
    with pytest.raises(ValueError):
        RedisLease(Redis(), "r", "t", ttl)


async def test_take_says_how_long_the_holders_lease_has_left(redis: Redis) -> None:
    room = new_room()
    mine = RedisLease(redis, room, new_token("a"), ttl=5)
    theirs = RedisLease(redis, room, new_token("b"), ttl=5)
    assert await mine.take() is None
    assert await mine.take() is None  # already its own: still held, not refused
    left = await theirs.take()
    assert left is not None and 4 < left <= 5
    assert await lease_holder(redis, room) == mine.token
    await redis.persist(room_key(room, "owner"))  # a key without expiry: busy, 0 s left
    assert await theirs.take() == 0
    assert await mine.release()
    assert await theirs.take() is None
    assert await lease_holder(redis, room) == theirs.token
