"""The lease keeper: renews a held lease at ttl/6 and reports its loss, once and promptly.

Timing rule (all on the local monotonic clock): a renewal (or the acquisition) *sent* at
``t`` and confirmed by Redis makes the lease valid until ``t + ttl * (1 - DRIFT) - MARGIN``,
because Redis starts the key's new ttl after receiving the command, never before ``t``.
The keeper renews every ``ttl / 6`` (:data:`RENEWALS_PER_TTL`) counted from the last
confirmed send; a renewal that fails (Redis down, timeout) is retried every ``ttl / 10``
while the lease is still valid.

Why ttl/6: a dead owner's lease runs out ``ttl`` after its last renewal, so failover waits
between ``ttl - interval`` and ``ttl``; a live owner keeps its lease through a stall (a
paused or starved event loop) of up to ``ttl - interval``. Renewing often keeps that
tolerance close to the whole ttl, so the ttl (the worst failover) can be short: with the
hub's 1.5 s, stalls up to 1.25 s are survived and a dead owner's rooms are free within
1.5 s, where ttl/3 of a 2 s ttl gave 1.33 s and 2 s. It costs one small script call per
owned room every ttl/6 (four a second per room).

The keeper reports the loss (sets :attr:`LeaseKeeper.lost`, calls ``on_lost`` with a
:class:`~sync.server.cluster.errors.LeaseLost`) as soon as either:

- Redis answers a renewal with "not yours" (the key expired or another holder has it):
  reason ``taken``;
- the local deadline passes without a confirmed renewal (the process was paused past the
  ttl, or Redis has been unreachable for that long): reason ``expired``. The keeper does not
  need Redis to notice this: a process resumed after SIGSTOP reports it on its first turn.

:meth:`LeaseKeeper.stop` does not rely on cancelling the keeper's task alone: on Python
3.11, ``asyncio.wait_for`` (which redis-py uses for every socket write) loses a
cancellation that arrives as the awaited write completes, and a keeper whose
cancellation was lost in a renewal would renew forever, holding a lease its owner gave up
(and ``stop`` would never return). So ``stop`` also sets a flag the keeper checks after
every await, and wakes it from its sleep.

After a loss the keeper stops for good: it never renews again and never re-creates the key,
so a holder that lost its lease must acquire anew (and claim a new fence). It then deletes
its key if that is still its own (compare-and-delete), so a successor need not wait for the
expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

from .errors import LeaseLost, LossReason
from .lease import RedisLease

__all__ = [
    "DRIFT",
    "GATHER_WINDOW",
    "MARGIN",
    "RENEWALS_PER_TTL",
    "LeaseKeeper",
    "lease_deadline",
]

log = logging.getLogger("crdt_state.cluster")

DRIFT: Final = 0.01
"""Fraction of the ttl allowed for the clock rate difference between this host and Redis."""
RENEWALS_PER_TTL: Final = 6
"""The keeper renews every ``ttl / RENEWALS_PER_TTL`` (see the module doc)."""
GATHER_WINDOW: Final = 1 / (2 * RENEWALS_PER_TTL)
"""Longest a hub holds a renewal back to send it with others, as a fraction of the ttl
(:class:`~sync.server.cluster.renewals.Renewals`)."""
MARGIN: Final = 0.002
"""Seconds taken off every lease validity, for the clock's own granularity."""


def lease_deadline(sent_at: float, ttl: float) -> float:
    """Until when (monotonic seconds) a lease confirmed by a command sent at ``sent_at`` holds."""
    return sent_at + ttl * (1 - DRIFT) - MARGIN


class LeaseKeeper:
    """Keeps one acquired :class:`RedisLease` alive on its own asyncio task.

    ``acquired_at`` is the monotonic time just *before* the acquiring ``SET`` was sent.
    ``on_lost`` is called once, on the event loop, when the lease is lost (never after
    :meth:`stop`); exceptions it raises are logged and ignored. Use :meth:`valid` before
    acting as the owner, and always guard writes with the fence (:mod:`sync.server.cluster.fence`):
    between a check and a write the process may be paused.
    """

    def __init__(
        self,
        lease: RedisLease,
        *,
        acquired_at: float,
        on_lost: Callable[[LeaseLost], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease: Final = lease
        self.interval: Final = lease.ttl / RENEWALS_PER_TTL
        self.retry_delay: Final = lease.ttl / 10
        self.valid_until = lease_deadline(acquired_at, lease.ttl)
        self.lost: Final = asyncio.Event()
        self.loss: LeaseLost | None = None
        self.renewals = 0
        """Renewals Redis confirmed."""
        self.failures = 0
        """Renewals that got no answer (Redis down, timeout, error) and were retried."""
        self._on_lost = on_lost
        self._clock = clock
        self._next_at = acquired_at + self.interval
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._wake = asyncio.Event()  # set by stop(): ends the keeper's sleep at once

    def start(self) -> LeaseKeeper:
        """Start renewing on the running loop (once); returns ``self``."""
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"lease-keeper {self.lease.key}"
            )
        return self

    def valid(self) -> bool:
        """True while the lease is held: not lost, and its local deadline not passed."""
        return self.loss is None and not self._stopped and self._clock() < self.valid_until

    def remaining(self) -> float:
        """Seconds of validity left (0 when lost, stopped or expired)."""
        if not self.valid():
            return 0.0
        return self.valid_until - self._clock()

    async def stop(self) -> None:
        """Stop renewing (no loss is reported); the lease then expires unless released.

        Returns once the keeper's task ended: at once when it sleeps, else when its
        renewal in flight returns (bounded by the lease's deadline and the client's
        socket timeouts), even if the cancellation was lost (see the module doc).
        """
        self._stopped = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            # wait() rather than ``await task``: a cancellation of the caller must reach
            # the caller, not be taken for the keeper's own and swallowed
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                log.warning("lease %s: keeper failed: %r", self.lease.key, task.exception())

    async def _run(self) -> None:
        while not self._stopped:
            now = self._clock()
            if now >= self.valid_until:
                await self._lose(LossReason.EXPIRED)
                return
            await self._sleep(max(0.0, min(self._next_at, self.valid_until) - now))
            if self._stopped:
                return
            sent = self._clock()
            if sent >= self.valid_until:  # slept past it: paused, or a starved loop
                await self._lose(LossReason.EXPIRED)
                return
            try:
                async with asyncio.timeout(self.valid_until - sent):
                    mine = await self.lease.renew()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # unavailable, timed out, or a server error: retry
                if self._stopped:  # stopped meanwhile (its cancellation may have been lost)
                    return
                self.failures += 1
                log.info("lease %s: renewal failed (%s), retrying", self.lease.key, exc)
                self._next_at = self._clock() + self.retry_delay
                continue
            if self._stopped:  # stopped meanwhile (its cancellation may have been lost)
                return
            if self._clock() >= self.valid_until:
                # confirmed too late to count: never act on a lease past its deadline
                await self._lose(LossReason.EXPIRED)
                return
            if not mine:
                await self._lose(LossReason.TAKEN)
                return
            self.renewals += 1
            self.valid_until = lease_deadline(sent, self.lease.ttl)
            self._next_at = sent + self.interval

    async def _sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when :meth:`stop` is called meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _lose(self, reason: LossReason) -> None:
        loss = LeaseLost(self.lease.room, self.lease.token, reason)
        self.loss = loss
        self.lost.set()
        log.warning("lease %s lost (%s)", self.lease.key, reason.value)
        if self._on_lost is not None:
            try:
                self._on_lost(loss)
            except Exception:
                log.exception("lease %s: on_lost callback failed", self.lease.key)
        if reason is LossReason.EXPIRED:
            # free the key for a successor now if it is still ours; harmless if not
            with contextlib.suppress(Exception):
                async with asyncio.timeout(min(self.lease.ttl, 1.0)):
                    await self.lease.release()
