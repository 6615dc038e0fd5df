"""One hub's lease calls, gathered: one script call renews and tries many rooms' leases.

Each owned room's keeper renews its lease every ``ttl / 6``; one call each costs a Redis
round trip and a turn of the event loop per room, four times a second. A :class:`Renewals`
instead holds each renewal asked for up to ``window`` seconds and sends every renewal
asked for meanwhile in **one** script call (compare-and-extend for each key, as
:meth:`~sync.server.cluster.lease.RedisLease.renew`), each answered on its own.

Why holding a renewal back is safe: a keeper counts its lease's validity from the moment
it *asked* (before the wait), earlier than Redis receives the command, so the delay only
shortens what the keeper believes; and since the next renewal is asked for ``ttl / 6``
after that moment, the keepers of a hub soon ask within one window of each other and
share the call. The call names many rooms' keys, so it needs one Redis server (on a Redis
Cluster it would be one call per slot), as the hub's follower does.

The same call carries the hub's **routine take attempts** (:meth:`Renewals.take`): every
hub tries, every ``ttl / 3``, the lease of each room it serves and does not own, to
notice a dead owner (N - 1 attempts per room with N hubs). Held back up to the same
window, they share the renewals' call (``SET`` if free, else the holder's ``PTTL``, as
:meth:`~sync.server.cluster.lease.RedisLease.take`). Holding one back is safe for the same
reason: the contender counts a lease it took from before it asked. It costs no failover
time: an attempt that matters (the first of a room, or the one timed for just after the
holder's lease runs out) is not routine and goes alone at once; and a contender times
its next routine attempt from when it asked this one, not from the answer, so the window
does not stretch its period (the attempts of a hub, asked within one window, stay
within one window of each other and keep sharing a call).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.asyncio import Redis

from .errors import ClusterUnavailable
from .lease import LEASE_CALLS, RENEW, TAKE, UNAVAILABLE, RedisLease

__all__ = ["Renewals"]


class Renewals:
    """Sends the lease calls asked for within ``window`` seconds together (see the module doc).

    Args:
        redis: the cluster's Redis.
        window: longest a renewal waits for others (seconds).
    """

    def __init__(self, redis: Redis, window: float) -> None:
        self.redis = redis
        self.window = window
        self.calls = 0
        """Script calls sent so far (for tests and metrics)."""
        self.takes = 0
        """Take attempts sent in those calls."""
        self._pending: list[tuple[RedisLease, bytes, asyncio.Future[int]]] = []
        self._flush: asyncio.Task[None] | None = None
        self._script = redis.register_script(LEASE_CALLS)

    async def renew(self, lease: RedisLease) -> bool:
        """Extend ``lease`` by its ttl if it is still its token's; False if not.

        Raises:
            ClusterUnavailable: Redis did not answer.
        """
        return await self._ask(lease, RENEW) == 1

    async def take(self, lease: RedisLease) -> float | None:
        """Take ``lease`` if it is free, sent with the calls asked for within the window.

        Returns:
            ``None`` when ``lease``'s token holds the lease now, else the seconds the
            holder's lease has left (0 when it has no expiry).

        Raises:
            ClusterUnavailable: Redis did not answer.
        """
        left = await self._ask(lease, TAKE)
        return None if left == -1 else left / 1000

    async def _ask(self, lease: RedisLease, op: bytes) -> int:
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append((lease, op, done))
        if self._flush is None:
            self._flush = asyncio.create_task(self._send_later(), name="lease calls")
        return await done

    async def close(self) -> None:
        """Stop; renewals still waiting fail with ``ClusterUnavailable``."""
        task, self._flush = self._flush, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail(self._take(), ClusterUnavailable("redis", "the hub is stopping"))

    def _take(self) -> list[tuple[RedisLease, bytes, asyncio.Future[int]]]:
        batch, self._pending = self._pending, []
        return batch

    async def _send_later(self) -> None:
        try:
            await asyncio.sleep(self.window)
        finally:
            self._flush = None
        batch = [call for call in self._take() if not call[2].done()]
        if not batch:
            return
        args: list[bytes | str | int] = []
        for lease, op, _ in batch:
            args += [op, lease.token, lease.ttl_ms]
        try:
            self.calls += 1
            self.takes += sum(op == TAKE for _, op, _ in batch)
            answers: Any = await self._script(keys=[call[0].key for call in batch], args=args)
        except UNAVAILABLE as exc:
            self._fail(batch, ClusterUnavailable("redis", f"redis did not answer: {exc}"))
            return
        except Exception as exc:  # an unexpected reply: each keeper retries
            self._fail(batch, ClusterUnavailable("redis", f"redis refused the renewals: {exc}"))
            return
        for (_, _, done), answer in zip(batch, answers, strict=False):
            if not done.done():
                done.set_result(int(answer))
        self._fail(batch, ClusterUnavailable("redis", "redis answered part of the renewals"))

    @staticmethod
    def _fail(batch: list[tuple[RedisLease, bytes, asyncio.Future[int]]], error: Exception) -> None:
        for _, _, done in batch:
            if not done.done():
                done.set_exception(error)
