"""The progress of a remote agent's flush: its queued merges sent on a new connection.

When a connection comes up with merges queued (made offline, or unanswered when the
last connection dropped), the client sends them all at once and the hub answers them
one by one. :class:`FlushProgress` follows those answers and logs, on the
``crdt_state.client`` logger (see :mod:`crdt_state.progress`):

- ``offline_flush_start``: ``total`` merges sent, ``hub`` (the URL, token masked),
  ``writer``;
- ``offline_flush_progress``: ``done``/``total`` merges ended (applied or failed), every
  100 merges or every 0.5 s;
- ``offline_flush_done``: ``done``, ``total``, ``seconds``, ``complete`` (False when the
  connection dropped first; the rest is sent again on the next one, a new flush).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Final

from crdt_state.progress import ProgressLog

__all__ = ["FLUSH_EVERY", "FlushProgress"]

FLUSH_EVERY: Final = 100
"""Merges between two ``offline_flush_progress`` events (at most)."""

log = logging.getLogger("crdt_state.client")


class FlushProgress:
    """Follows the merges one flush sent until each has ended; logs the progress.

    Args:
        orders: the orders of the merges sent (see ``ClientCore.flushed``).
        hub: the hub's URL, token masked.
        writer: the agent's writer id.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        orders: Iterable[int],
        hub: str,
        writer: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._left = set(orders)
        total = len(self._left)
        what = f"flushing {total} queued merges to {hub}"
        self._log = ProgressLog(log, "offline_flush", what, total, unit="merges",
                                every=FLUSH_EVERY, clock=clock, hub=hub,
                                writer=writer)  # fmt: skip
        self._log.start()

    @property
    def finished(self) -> bool:
        """True once every merge ended, or the flush was stopped."""
        return self._log.finished

    def ended(self, order: int) -> None:
        """The merge at ``order`` ended (others are ignored); log when due."""
        if order not in self._left or self._log.finished:
            return
        self._left.discard(order)
        self._log.advance()
        if not self._left:
            self._log.finish()

    def stop(self) -> None:
        """The connection dropped: log the flush as done, incomplete (once)."""
        self._log.finish()
