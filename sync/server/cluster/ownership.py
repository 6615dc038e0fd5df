"""Room ownership: the Redis lease, the PostgreSQL fence and the keeper, taken together.

:func:`try_acquire` takes a room if nobody owns it: ``SET NX`` of the lease, then the claim
of a new fence (one PostgreSQL transaction), then a :class:`LeaseKeeper` renewing the lease.
The returned :class:`Ownership` is the owner's handle: :meth:`Ownership.transaction` opens
a transaction that commits only under its fence, :meth:`Ownership.release` gives the room
up. :func:`acquire` waits until the room is free and takes it.

The owner's duties (the hub's owner loop, built on this): load the room's state from
PostgreSQL *after* the claim, write only through :meth:`Ownership.transaction` (or
:func:`~sync.server.cluster.fence.check_fence` in a storage backend's own transaction), and stop
acting as the owner at the first ``LeaseLost`` or ``Fenced``: a new ownership is a new
acquisition, with a new fence and a fresh load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection, OperationalError
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from .errors import ClusterUnavailable, LeaseLost, LossReason
from .fence import Fence, claim_fence, fenced_transaction
from .keeper import LeaseKeeper, lease_deadline
from .keys import DEFAULT_SPACE, KeySpace
from .lease import RedisLease, new_token
from .renewals import Renewals

__all__ = ["Ownership", "acquire", "try_acquire"]

log = logging.getLogger("crdt_state.cluster")

Pool = AsyncConnectionPool[AsyncConnection[Any]]


@dataclass(eq=False)
class Ownership:
    """A held room: its ``fence``, its ``lease`` and the ``keeper`` renewing it.

    Valid until the keeper reports the loss (``lost`` is set, ``on_lost`` was called) or
    :meth:`release`. Usable as ``async with``: released at the end of the block.
    """

    fence: Fence
    lease: RedisLease
    keeper: LeaseKeeper
    pool: Pool = field(repr=False)

    @property
    def room(self) -> str:
        """The name of the held room."""
        return self.fence.room

    @property
    def space(self) -> KeySpace:
        """The key space of the lease: the room's streams are named in it too."""
        return self.lease.space

    @property
    def token(self) -> str:
        """The lease token, also recorded as the room's ``owner`` in PostgreSQL."""
        return self.lease.token

    @property
    def lost(self) -> asyncio.Event:
        """Set when the keeper reports the lease lost."""
        return self.keeper.lost

    def valid(self) -> bool:
        """True while the lease is held (a local check, no I/O)."""
        return self.keeper.valid()

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless the lease is held right now."""
        if self.keeper.loss is not None:
            raise self.keeper.loss
        if not self.keeper.valid():
            raise LeaseLost(self.room, self.token, LossReason.EXPIRED)

    @asynccontextmanager
    async def transaction(
        self, conn: AsyncConnection[Any] | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """A transaction that commits only while this owner's fence is the room's.

        Raises ``LeaseLost`` before touching PostgreSQL when the keeper already knows the
        lease is gone, and ``Fenced`` (rolling back) when another hub claimed the room. On
        ``conn`` if given (outside any transaction), else on a connection of the pool.
        """
        self.check()
        if conn is not None:
            async with fenced_transaction(conn, self.fence) as tx:
                yield tx
            return
        async with self.pool.connection() as pooled, fenced_transaction(pooled, self.fence) as tx:
            yield tx

    async def release(self) -> None:
        """Stop renewing and delete the lease if still ours; never raises for Redis errors.

        The fence is left as it is: the next claimant bumps it.
        """
        await self.keeper.stop()
        with contextlib.suppress(ClusterUnavailable, TimeoutError):
            async with asyncio.timeout(min(self.lease.ttl, 1.0)):
                await self.lease.release()

    async def __aenter__(self) -> Ownership:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


async def try_acquire(
    redis: Redis,
    pool: Pool,
    room: str,
    *,
    owner: str,
    ttl: float,
    on_lost: Callable[[LeaseLost], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_busy: Callable[[float], object] | None = None,
    renewals: Renewals | None = None,
    routine: bool = False,
    space: KeySpace = DEFAULT_SPACE,
) -> Ownership | None:
    """Take ``room`` if its lease is free: lease, then a new fence, then a running keeper.

    Returns ``None`` when another holder has the lease (or when the claim took so long that
    the fresh lease already ran out; it is then released). ``owner`` names this hub (the
    token adds randomness); ``ttl`` is the lease's lifetime in seconds. Raises
    ``ClusterUnavailable`` when Redis or PostgreSQL does not answer (nothing is then held).
    ``on_busy`` is told, when another holder has the lease, the seconds its lease has
    left (from the same round trip): a contender sleeps that long, no longer.
    ``renewals``: the hub's gathered renewals, which the keeper then renews through.
    ``routine``: a contender's periodic attempt, sent with the hub's other lease calls
    (held back up to their window; see :mod:`~sync.server.cluster.renewals`).
    ``space``: the cluster's key space (the lease's key is named in it).
    """
    lease = RedisLease(redis, room, new_token(owner), ttl, renewals=renewals, space=space)
    started = clock()
    left = await lease.take(routine=routine)
    if left is not None:
        if on_busy is not None:
            on_busy(left)
        return None
    try:
        # the claim is worth nothing once the fresh lease ran out: wait no longer for a
        # connection (the pool's own timeout, 5 s, held a restarting PostgreSQL's rooms)
        fence = await _claim(pool, room, lease.token, wait=ttl)
    except BaseException:
        with contextlib.suppress(Exception):
            await lease.release()
        raise
    if clock() >= lease_deadline(started, ttl):
        log.warning("room %r: claim outlived the fresh lease, giving it up", room)
        with contextlib.suppress(Exception):
            await lease.release()
        return None
    keeper = LeaseKeeper(lease, acquired_at=started, on_lost=on_lost, clock=clock).start()
    log.info("room %r: owned by %s with fence %d", room, lease.token, fence.value)
    return Ownership(fence=fence, lease=lease, keeper=keeper, pool=pool)


async def _claim(pool: Pool, room: str, token: str, *, wait: float) -> Fence:
    """Claim ``room``'s next fence for ``token`` on a connection of ``pool``.

    Raises:
        ClusterUnavailable: no connection within ``wait`` seconds (a ``PoolTimeout``), or
            PostgreSQL did not answer the claim.
    """
    try:
        async with pool.connection(timeout=wait) as conn:
            return await claim_fence(conn, room, token)
    except OperationalError as exc:  # PoolTimeout is one
        raise ClusterUnavailable("postgres", f"postgres did not answer: {exc}") from exc


async def acquire(
    redis: Redis,
    pool: Pool,
    room: str,
    *,
    owner: str,
    ttl: float,
    poll: float | None = None,
    on_lost: Callable[[LeaseLost], object] | None = None,
    space: KeySpace = DEFAULT_SPACE,
) -> Ownership:
    """Wait until ``room`` is free and take it (see :func:`try_acquire`).

    Polls every ``poll`` seconds (default ``min(ttl / 10, 0.1)``), or sooner when the
    current lease expires sooner; Redis or PostgreSQL being unavailable only delays it.
    Bound the wait with ``asyncio.timeout``.
    """
    step = poll if poll is not None else min(ttl / 10, 0.1)
    left: list[float] = []  # what the last attempt learnt of the holder's lease
    while True:
        left.clear()
        try:
            got = await try_acquire(
                redis,
                pool,
                room,
                owner=owner,
                ttl=ttl,
                on_lost=on_lost,
                on_busy=left.append,
                space=space,
            )
            if got is not None:
                return got
        except ClusterUnavailable as exc:
            log.info("room %r: cannot contend yet (%s)", room, exc)
        # a lease without expiry (0 s left) is no reason to poll faster than ``step``
        await asyncio.sleep(max(0.001, min(step, left[0])) if left and left[0] > 0 else step)
