"""A room replica's backlog: published updates go to the sessions at once, into the replica later.

Every hub follows every room it serves, so each published update would be applied to
``N`` replicas (and twice on the owner's hub: its judge has it already). Applying one to a
:class:`~crdt_state.SharedState` costs about 25 times a bare Yjs apply (the change log,
the mirror, the paths written), while the hub's sessions only need the update's bytes.
So :class:`Backlog` sends each update to the room's sessions at once
(:meth:`~sync.server._room.Room.relay`: the same frames, in the same order, as when the
replica's listener produced them) and keeps it for the replica, which gets everything
kept as **one** merged update (:meth:`~sync.server._room.Room.absorb`), whose cost
hardly grows with the updates it carries (a one-key merge each, on the benchmark machine:
~110 µs for one, ~20 µs per update for 12, ~6 µs per update for 64):

- before anyone reads the replica: :attr:`Room.state <sync.server._room.Room.state>`
  calls :meth:`Backlog.settle` first (a new session's sync, the greeting's state vector,
  the inspector, the catch-up a new owner computes against the replica), so a reader
  never sees a replica that lacks an update some session was sent;
- once :data:`MAX_UPDATES` updates or :data:`MAX_BYTES` bytes wait;
- at the latest :data:`DELAY` seconds after the first update kept (listeners of the
  replica, such as the inspector's feed, see its changes that late at most).

The updates were validated and committed by the room's owner before they were
published, so nothing is lost by applying them late: updates are idempotent and
commutative, and the replica's state after the merged apply is the one it would have
had after applying each. A merged update the replica refuses is applied update by
update; one it refuses alone is logged and dropped (as before: the owner accepted it).
Any other failure reports the replica stale (``on_failure``): it is loaded again from
the durable store.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Final

from pycrdt import merge_updates

from crdt_state import CrdtStateError
from sync.server._room import Room

__all__ = ["DELAY", "MAX_BYTES", "MAX_UPDATES", "Backlog"]

log = logging.getLogger("crdt_state.cluster")

MAX_UPDATES: Final = 256
"""Updates kept at most: the one that reaches it applies them all."""
MAX_BYTES: Final = 1 << 20
"""Bytes kept at most: the update that reaches it applies them all."""
DELAY: Final = 1.0
"""Seconds after the first update kept at which the replica gets them at the latest."""
AGENT: Final = "cluster"
"""The agent the replica's change log names for followed updates."""


class Backlog:
    """The updates ``room``'s sessions were sent but its replica has not got yet.

    Installs itself as ``room.before_read``. :meth:`add` is for the event loop's thread;
    :meth:`settle` may run on any thread (a reader of the replica in a worker thread).

    Args:
        room: the hub's room (its state is the replica).
        on_failure: called when applying failed for a reason other than a refused
            update (the replica must be loaded again).
    """

    def __init__(self, room: Room, on_failure: Callable[[], None]) -> None:
        self.room = room
        self.on_failure = on_failure
        self.settled = 0
        """Merged applies made so far (for tests and metrics)."""
        self._updates: list[bytes] = []
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._lock = threading.RLock()  # one settle at a time; re-entered by listeners
        room.before_read = self.settle

    @property
    def pending(self) -> int:
        """How many updates wait for the replica."""
        return len(self._updates)

    def add(self, update: bytes) -> None:
        """Send ``update`` to the room's sessions now; the replica gets it later (event loop)."""
        self.room.relay(update)
        with self._lock:
            self._updates.append(update)
            self._bytes += len(update)
            full = len(self._updates) >= MAX_UPDATES or self._bytes >= MAX_BYTES
        if full:
            self.settle()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(DELAY, self._due)

    def _due(self) -> None:
        self._timer = None
        self.settle()

    def settle(self) -> None:
        """Apply every kept update to the replica, as one (nothing to do: returns at once)."""
        if not self._updates:
            return
        with self._lock:
            updates, self._updates, self._bytes = self._updates, [], 0
            if not updates:  # another thread settled meanwhile
                return
            self.settled += 1
            try:
                self._apply(updates)
            except Exception:
                log.exception("room %r: applying followed updates failed", self.room.name)
                self.on_failure()

    def _apply(self, updates: list[bytes]) -> None:
        if len(updates) > 1:
            try:
                merged: bytes | None = bytes(merge_updates(*updates))
            except Exception as exc:  # pycrdt raises plain exceptions
                count = len(updates)
                log.warning("room %r: cannot merge %d updates (%s)", self.room.name, count, exc)
                merged = None
            if merged is not None and self._absorb(merged):
                return
        for update in updates:
            self._absorb(update)

    def _absorb(self, update: bytes) -> bool:
        """Apply ``update`` to the replica; False (logged) when it refuses it."""
        try:
            self.room.absorb(update, AGENT)
        except CrdtStateError as exc:  # cannot happen for updates the owner accepted
            log.error("room %r: published update refused by the replica: %s", self.room.name, exc)
            return False
        return True

    def close(self) -> None:
        """Drop the kept updates and the timer (the room closes; event loop only)."""
        with self._lock:
            self._updates, self._bytes = [], 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
