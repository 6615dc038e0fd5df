"""One hub's lease renewals, gathered: one script call renews the leases of many rooms.

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
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from redis.asyncio import Redis

from .errors import ClusterUnavailable
from .lease import UNAVAILABLE, RedisLease

__all__ = ["Renewals"]

# KEYS: lease keys; ARGV: token and ttl in ms for each key in turn. Per key, 1 if
# extended, 0 if not that token's.
_RENEW_MANY: Final = """
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('get', key) == ARGV[2 * i - 1] then
    out[i] = redis.call('pexpire', key, ARGV[2 * i])
  else
    out[i] = 0
  end
end
return out
"""


class Renewals:
    """Sends the renewals asked for within ``window`` seconds together (see the module doc).

    Args:
        redis: the cluster's Redis.
        window: longest a renewal waits for others (seconds).
    """

    def __init__(self, redis: Redis, window: float) -> None:
        self.redis = redis
        self.window = window
        self.calls = 0
        """Script calls sent so far (for tests and metrics)."""
        self._pending: list[tuple[RedisLease, asyncio.Future[bool]]] = []
        self._flush: asyncio.Task[None] | None = None
        self._script = redis.register_script(_RENEW_MANY)

    async def renew(self, lease: RedisLease) -> bool:
        """Extend ``lease`` by its ttl if it is still its token's; False if not.

        Raises:
            ClusterUnavailable: Redis did not answer.
        """
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((lease, done))
        if self._flush is None:
            self._flush = asyncio.create_task(self._send_later(), name="lease renewals")
        return await done

    async def close(self) -> None:
        """Stop; renewals still waiting fail with ``ClusterUnavailable``."""
        task, self._flush = self._flush, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail(self._take(), ClusterUnavailable("redis", "the hub is stopping"))

    def _take(self) -> list[tuple[RedisLease, asyncio.Future[bool]]]:
        batch, self._pending = self._pending, []
        return batch

    async def _send_later(self) -> None:
        try:
            await asyncio.sleep(self.window)
        finally:
            self._flush = None
        batch = [(lease, done) for lease, done in self._take() if not done.done()]
        if not batch:
            return
        args: list[str | int] = []
        for lease, _ in batch:
            args += [lease.token, lease.ttl_ms]
        try:
            self.calls += 1
            answers: Any = await self._script(keys=[lease.key for lease, _ in batch], args=args)
        except UNAVAILABLE as exc:
            self._fail(batch, ClusterUnavailable("redis", f"redis did not answer: {exc}"))
            return
        except Exception as exc:  # an unexpected reply: each keeper retries
            self._fail(batch, ClusterUnavailable("redis", f"redis refused the renewals: {exc}"))
            return
        for (_, done), answer in zip(batch, answers, strict=False):
            if not done.done():
                done.set_result(int(answer) == 1)
        self._fail(batch, ClusterUnavailable("redis", "redis answered part of the renewals"))

    @staticmethod
    def _fail(batch: list[tuple[RedisLease, asyncio.Future[bool]]], error: Exception) -> None:
        for _, done in batch:
            if not done.done():
                done.set_exception(error)
