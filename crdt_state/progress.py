"""Progress of long work as structured logging events: start, progress, done.

Used for the work that can take a while: a store's compaction (``compaction``), a
reopened state's replay of a long log (``replay``), a remote agent's flush of its queued
merges on reconnect (``offline_flush``, in ``sync``). Each piece of work logs, with
``extra={"event": ...}`` like every structured event of the project:

- ``<name>_start``: ``total`` (how many items), plus the work's own fields;
- ``<name>_progress``: ``done`` and ``total``, every ``every`` items or every
  ``interval`` seconds, whichever comes first (never for the last item);
- ``<name>_done``: ``done``, ``total``, ``seconds`` and ``complete`` (``done >= total``).

Every record also carries ``done``, ``total`` and ``seconds`` (0 at the start). A
``quiet`` piece of work (frequent and usually short: compactions, replays) logs at
DEBUG unless it turns out long: progress due to ``interval`` and a done after
``interval`` seconds or more are logged at INFO. The decision when to report
(:meth:`ProgressLog.due`) is pure; the clock is injectable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = ["DEFAULT_EVERY", "DEFAULT_INTERVAL", "ProgressLog"]

DEFAULT_EVERY: Final = 1_000
"""Items between two progress events (at most)."""
DEFAULT_INTERVAL: Final = 0.5
"""Seconds between two progress events (at most, while items keep coming)."""


class ProgressLog:
    """The start, progress and end of one long piece of work, as logging events.

    Args:
        logger: where the events go.
        name: the events' prefix (``compaction`` gives ``compaction_start`` ...).
        what: the work in words, for the messages (``"compacting /data/a.db"``).
        total: how many items the work has.
        unit: the items in words, for the messages (``"rows"``).
        every: report after this many items at most (default :data:`DEFAULT_EVERY`).
        interval: report after this many seconds at most (default
            :data:`DEFAULT_INTERVAL`; both read when the work starts).
        quiet: DEBUG unless the work turns out long (see the module).
        clock: monotonic seconds (tests pass their own).
        fields: more ``extra`` fields on every event (``room=``, ``store=``...).
    """

    def __init__(
        self,
        logger: logging.Logger,
        name: str,
        what: str,
        total: int,
        *,
        unit: str = "items",
        every: int | None = None,
        interval: float | None = None,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
        **fields: Any,
    ) -> None:
        every = DEFAULT_EVERY if every is None else every
        interval = DEFAULT_INTERVAL if interval is None else interval
        if every < 1:
            raise ValueError("every must be at least 1")
        self.logger = logger
        self.name = name
        self.what = what
        self.total = total
        self.unit = unit
        self.every = every
        self.interval = interval
        self.quiet = quiet
        self.clock = clock
        self.fields = fields
        self.done = 0
        self.finished = False
        self._started = clock()
        self._last_done = 0
        self._last_time = self._started

    def due(self, done: int, now: float) -> bool:
        """Whether a progress event is due after ``done`` items at time ``now`` (pure)."""
        if done >= self.total:
            return False  # the done event says it
        return done - self._last_done >= self.every or now - self._last_time >= self.interval

    def start(self) -> None:
        """Log ``<name>_start``."""
        level = logging.DEBUG if self.quiet else logging.INFO
        self._emit(level, "start", f"{self.what}: started, {self.total} {self.unit}", 0.0)

    def advance(self, items: int = 1) -> None:
        """Count ``items`` more done; log ``<name>_progress`` when one is due."""
        self.done += items
        now = self.clock()
        if not self.due(self.done, now):
            return
        timed = now - self._last_time >= self.interval
        self._last_done, self._last_time = self.done, now
        level = logging.DEBUG if self.quiet and not timed else logging.INFO
        seconds = now - self._started
        self._emit(level, "progress", f"{self.what}: {self.done}/{self.total} {self.unit}", seconds)

    def finish(self, **more: Any) -> None:
        """Log ``<name>_done`` (once) with ``complete`` and ``more`` fields."""
        if self.finished:
            return
        self.finished = True
        seconds = self.clock() - self._started
        complete = self.done >= self.total
        level = logging.DEBUG if self.quiet and seconds < self.interval else logging.INFO
        how = "done" if complete else "stopped"
        text = f"{self.what}: {how}, {self.done}/{self.total} {self.unit} in {seconds:.3f} s"
        self._emit(level, "done", text, seconds, complete=complete, **more)

    def _emit(self, level: int, phase: str, message: str, seconds: float, **more: Any) -> None:
        if not self.logger.isEnabledFor(level):
            return
        extra = {
            **self.fields,
            "event": f"{self.name}_{phase}",
            "done": self.done,
            "total": self.total,
            "seconds": seconds,
            **more,
        }
        self.logger.log(level, "%s", message, extra=extra)
