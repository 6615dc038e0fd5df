"""A room's ownership lease in Redis: ``SET NX PX``, compare-and-extend, compare-and-delete.

The lease is one key, ``crdt:<cluster>:{room}:owner`` (the cluster's key space, see
:mod:`sync.server.cluster.keys`), whose value is the holder's *token*: unique per
acquisition, so a stale holder can neither renew nor delete a later holder's lease, even
when both are the same hub. The key expires by itself ``ttl`` after the last successful
acquire or renewal; Redis is the only judge of who holds it. The lease alone never makes
a write safe (a paused holder may wake up after its key expired): writes are guarded by
the fencing number, :mod:`sync.server.cluster.fence`.

Connection problems (refused, reset, timed out, Redis still loading) are raised as
:class:`~sync.server.cluster.errors.ClusterUnavailable`; the caller decides whether to retry.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable
from typing import Any, Final, Protocol, TypeVar

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from .errors import ClusterUnavailable
from .keys import DEFAULT_SPACE, OWNER, KeySpace

__all__ = ["LEASE_CALLS", "RENEW", "TAKE", "RedisLease", "Renewer", "lease_holder", "new_token"]

_T = TypeVar("_T")

# The lease calls, one script for one lease or many (a hub's gathered calls).
# KEYS: lease keys; ARGV: for each key in turn, the call ('r' renew, 't' take), the
# token and the ttl in ms. Per key: a renewal 1 if extended, 0 if not that token's; a
# take -1 if the token holds the lease now, else the ms the holder's lease has left (0:
# no expiry). A single call is the same script with one key.
LEASE_CALLS: Final = """
local out = {}
for i, key in ipairs(KEYS) do
  local op, token, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local holder = redis.call('get', key)
  if op == 'r' then
    if holder == token then
      out[i] = redis.call('pexpire', key, ttl)
    else
      out[i] = 0
    end
  elseif not holder then
    redis.call('set', key, token, 'PX', ttl)
    out[i] = -1
  elseif holder == token then
    out[i] = -1
  else
    local left = redis.call('pttl', key)
    if left < 0 then
      left = 0
    end
    out[i] = left
  end
end
return out
"""
RENEW: Final = b"r"
TAKE: Final = b"t"

# KEYS[1] = lease key, ARGV[1] = token. 1 if deleted, 0 if not ours (or gone).
_RELEASE: Final = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""

UNAVAILABLE: Final = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)
"""What redis-py raises when the server cannot be reached or does not answer in time."""


class Renewer(Protocol):
    """Renews leases on their behalf (a hub's gathered renewals, ``renewals.Renewals``)."""

    async def renew(self, lease: RedisLease) -> bool:
        """As :meth:`RedisLease.renew` for ``lease``."""
        ...

    async def take(self, lease: RedisLease) -> float | None:
        """As :meth:`RedisLease.take` for ``lease`` (a routine attempt, held back a little)."""
        ...


def new_token(owner: str) -> str:
    """A fresh lease token: ``owner`` (a hub's name, for people) plus 64 random bits."""
    return f"{owner}#{secrets.token_hex(8)}"


class RedisLease:
    """One holder's lease on one room; every method is one round trip.

    ``ttl`` is in seconds (at least 0.01). ``redis`` is any ``redis.asyncio.Redis``
    (``decode_responses`` either way); give it short socket timeouts and little or no
    retry of its own (see :func:`sync.server.cluster.redis_client`): the lease keeper has
    deadlines to keep. ``space``: the cluster's key space, which names the lease's key
    (default: :data:`~sync.server.cluster.keys.DEFAULT_SPACE`).
    """

    def __init__(
        self,
        redis: Redis,
        room: str,
        token: str,
        ttl: float,
        *,
        renewals: Renewer | None = None,
        space: KeySpace = DEFAULT_SPACE,
    ) -> None:
        if ttl < 0.01:
            raise ValueError(f"lease ttl must be at least 0.01 s, got {ttl!r}")
        if not token:
            raise ValueError("a lease token must be non-empty")
        self.redis: Final = redis
        self.room: Final = room
        self.token: Final = token
        self.ttl: Final = float(ttl)
        self.ttl_ms: Final = max(1, round(ttl * 1000))
        self.space: Final = space
        self.key: Final = space.key(room, OWNER)
        self.renewals = renewals
        self._calls = redis.register_script(LEASE_CALLS)
        self._release = redis.register_script(_RELEASE)

    async def acquire(self) -> bool:
        """Take the lease if nobody holds it (``SET key token NX PX ttl``); True if taken.

        Also True when the key already holds this token (a ``SET`` that Redis applied but
        whose answer was lost and retried): the lease then runs from the first attempt.
        """
        return await self.take() is None

    async def take(self, *, routine: bool = False) -> float | None:
        """Take the lease if nobody holds it, in one round trip; ``None`` once it is taken.

        A ``routine`` attempt (a contender's periodic check of a live holder) goes with
        the hub's other lease calls when the lease has a ``renewals``: held back up to
        its window, one script call for many rooms. Any other goes at once, alone.

        Returns:
            ``None`` when this token holds the lease now (just taken, or an earlier
            attempt's ``SET`` took it), else the seconds the current holder's lease has
            left (0 when Redis reports no expiry): when to try again.
        """
        if routine and self.renewals is not None:
            return await self.renewals.take(self)
        left = int((await self._one(TAKE))[0])
        return None if left == -1 else left / 1000

    async def renew(self) -> bool:
        """Extend the lease by ``ttl`` from now if it is still this token's; False if not.

        False means the key expired or another holder took it: the lease is lost for good
        (a holder never re-creates its key; it acquires anew, with a new fence).
        """
        if self.renewals is not None:  # with the hub's other renewals, in one call
            return await self.renewals.renew(self)
        done = (await self._one(RENEW))[0]
        return int(done) == 1

    async def _one(self, op: bytes) -> list[Any]:
        """This lease's ``op`` (:data:`RENEW` or :data:`TAKE`) alone, at once: its answer."""
        return list(await _call(self._calls(keys=[self.key], args=[op, self.token, self.ttl_ms])))

    async def release(self) -> bool:
        """Delete the lease if it is still this token's; True if deleted."""
        done = await _call(self._release(keys=[self.key], args=[self.token]))
        return int(done) == 1

    async def holder(self) -> str | None:
        """The token currently holding the room's lease, or ``None``."""
        return await lease_holder(self.redis, self.room, self.space)

    async def remaining(self) -> float | None:
        """Seconds until the room's lease (whoever holds it) expires, ``None`` if free."""
        ms = int(await _call(self.redis.pttl(self.key)))
        return ms / 1000 if ms >= 0 else None


async def lease_holder(redis: Redis, room: str, space: KeySpace = DEFAULT_SPACE) -> str | None:
    """The token holding ``room``'s lease in key space ``space``, ``None`` if it has no owner."""
    value = await _call(redis.get(space.key(room, OWNER)))
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


async def _call(pending: Awaitable[_T] | Any) -> Any:
    try:
        return await pending
    except UNAVAILABLE as exc:
        raise ClusterUnavailable("redis", f"redis did not answer: {exc}") from exc
