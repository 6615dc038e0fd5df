"""Loading a room's judge while its holder's lease runs out (before this hub may claim it).

A dead owner's room is silent for the rest of its lease, then for its successor's
judge load. A contender that sees the holder's lease shorter than a renewal leaves it
(:func:`renewal_missed`: the holder renews every ``ttl / 6``, so a live holder's lease
never has much less than ``ttl - ttl / 6`` left) loads the judge *read-only* at once, in
the time the lease still runs; after its claim the owner replays only the rows committed
since (:meth:`~sync.server.cluster.pgstorage.PostgresRoomStorage.open_judge`).

Why that is safe (see docs/architecture.md, "Ownership and fencing"):

- the preloaded state refuses every write until it is promoted, and only the owner's
  ``open_judge`` promotes it, after its claim committed;
- the catch-up read starts after the claim committed, and the claim bumped the fence
  on the row every earlier owner's commit locks and checks last: each commit of an
  earlier fence happened before the claim (so the read sees it) or is refused. Nothing
  an earlier owner commits after the preload is missed; nothing is replayed twice (the
  read starts after the preload's last seq, and a gap or a fold makes the owner load
  afresh).

:class:`Preload` holds at most one such state per room and hub: dropped (closed) as soon
as the holder is seen renewing again (or another hub took the room), or when the room
stops; taken by the claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from crdt_state import SharedState
from sync.server.cluster.keeper import GATHER_WINDOW, RENEWALS_PER_TTL

__all__ = ["MISSED_SLACK", "Preload", "renewal_missed"]

log = logging.getLogger("crdt_state.cluster")

MISSED_SLACK: Final = 0.1
"""Fraction of the ttl a holder's renewal may be late before a contender preloads."""


def renewal_missed(left: float, ttl: float) -> bool:
    """True when a lease with ``left`` seconds to run missed a renewal (pure).

    A holder asks for a renewal every ``ttl / RENEWALS_PER_TTL`` and its hub may hold it
    back up to ``GATHER_WINDOW * ttl`` to send it with others, so a live one's lease has
    at least ``ttl * (1 - 1 / RENEWALS_PER_TTL - GATHER_WINDOW)`` left (1.125 s of 1.5 s),
    less a late renewal's delay: below that by more than ``MISSED_SLACK * ttl`` (0.975 s
    of 1.5 s), it is likely dead or stalled. ``left`` 0 (a key without expiry) is no sign.
    (Without the window in it, a busy holder's lease seemed missed with 25 ms to spare:
    3-hub benchmark runs preloaded 5-16 judges of live owners.)
    """
    return 0 < left < ttl * (1 - 1 / RENEWALS_PER_TTL - GATHER_WINDOW - MISSED_SLACK)


class Preload:
    """At most one judge state of a room loaded ahead of a claim (see the module doc).

    ``load()`` loads it (read-only: it refuses writes until promoted after a claim).
    """

    def __init__(self, room: str, load: Callable[[], Coroutine[Any, Any, SharedState]]) -> None:
        self.room = room
        self._load = load
        self._task: asyncio.Task[SharedState] | None = None
        self.started = 0
        """Preloads started (for tests and logs)."""
        self.dropped = 0
        """Preloads dropped unused (the holder renewed, or the room stopped)."""

    @property
    def pending(self) -> bool:
        """True while a preload is loading or loaded, not yet taken or dropped."""
        return self._task is not None

    def saw(self, left: float, ttl: float) -> None:
        """A contender saw the holder's lease with ``left`` seconds to run (of ``ttl``).

        A missed renewal (:func:`renewal_missed`) starts a preload; a lease renewed (or
        taken by another hub) drops the one there is.
        """
        if renewal_missed(left, ttl):
            self.start()
        elif self._task is not None:
            self.drop()

    def start(self) -> None:
        """Start loading, unless a preload is already there."""
        if self._task is None:
            self.started += 1
            log.info("room %r: holder missed a renewal, preloading the judge", self.room)
            self._task = asyncio.create_task(self._load(), name=f"preload {self.room}")

    def drop(self) -> None:
        """Close the preloaded state (once loaded) unused; nothing when there is none."""
        task, self._task = self._task, None
        if task is None:
            return
        self.dropped += 1
        log.info("room %r: holder renewed, dropping the preloaded judge", self.room)
        task.add_done_callback(_close_loaded)

    async def take(self) -> SharedState | None:
        """The preloaded state (waiting for its load), ``None`` when none or it failed.

        The caller owns it from then on (closes it, or promotes it after a claim).
        """
        task, self._task = self._task, None
        if task is None:
            return None
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_close_loaded)  # ours is cancelled: nobody takes it
            raise
        except Exception as exc:  # nothing stored yet, PostgreSQL failed: load after the claim
            log.info("room %r: no preloaded judge (%s)", self.room, exc)
            return None


def _close_loaded(task: asyncio.Task[SharedState]) -> None:
    """Close the state ``task`` loaded (off the event loop), if it loaded one."""
    if task.cancelled() or task.exception() is not None:
        return
    state = task.result()
    with contextlib.suppress(RuntimeError):  # no running loop (shutting down): close here
        asyncio.get_running_loop().run_in_executor(None, state.close)
        return
    state.close()
