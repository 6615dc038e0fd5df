"""A bounded stop: steps awaited against one deadline; what misses it is abandoned, by name.

A hub that stops hands its rooms over (each owner's last writes, its judge closed) and
closes its clients. With a server that does not answer (a PostgreSQL behind a dead
link: no error, no answer) a judge's last write never returns, and an unbounded stop
never ended. :class:`Deadline` runs each step's jobs at once until they end or the
deadline passes; a job still running then is cancelled and named in
:attr:`Deadline.abandoned` (a step started after the deadline still gets
:data:`STEP_FLOOR` seconds: closing a client that answers takes less). Jobs' errors are
logged, never raised: a stop goes on past a step that failed.

What is abandoned may keep a thread blocked on its socket (a judge's store closing): a
process should then exit without waiting for its threads (``sync.cli`` does). An
abandoned room's lease lapses by itself; another hub then takes the room, and the
fencing number keeps the abandoned judge from ever committing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Final

__all__ = ["STEP_FLOOR", "STOP_TIMEOUT", "Deadline", "closing", "end_task"]

log = logging.getLogger("crdt_state.cluster")

STOP_TIMEOUT: Final = 10.0
"""Seconds a cluster node's stop may take (handing rooms over, closing its clients)."""

STEP_FLOOR: Final = 0.2
"""Seconds a step gets even when it starts after the deadline."""


class Deadline:
    """Steps of a stop, each bounded by one deadline ``timeout`` seconds from now.

    Attributes:
        abandoned: the names of the jobs that had not ended when their step's time ran
            out, in the order met.
    """

    def __init__(self, timeout: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.timeout = timeout
        self.deadline = self._loop.time() + timeout
        self.abandoned: list[str] = []

    async def run(self, jobs: Mapping[str, Awaitable[Any]]) -> None:
        """Run ``jobs`` (name: awaitable) at once until each ends or the time is up.

        Errors are logged; jobs still running then are cancelled (not waited for) and
        named in :attr:`abandoned`.
        """
        if not jobs:
            return
        tasks = {asyncio.ensure_future(job): name for name, job in jobs.items()}
        timeout = max(STEP_FLOOR, self.deadline - self._loop.time())
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.warning("stopping: %s failed: %r", tasks[task], task.exception())
        for task in pending:
            self.abandoned.append(tasks[task])
            task.cancel()
            task.add_done_callback(_retrieve)

    def report(self, who: str, note: str) -> list[str]:
        """Log what was abandoned, if anything (a warning: ``who``, ``note``); return it."""
        if self.abandoned:
            log.warning(
                "%s: stop abandoned after %g s: %s (%s)",
                who, self.timeout, ", ".join(self.abandoned), note,
            )  # fmt: skip
        return self.abandoned


async def end_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` until it ends; log its error, if any.

    (A loop that never stops by itself, whose cancellation can be lost in redis-py on
    Python 3.11's ``wait_for``: see ``keeper.py``.)
    """
    task.cancel()
    while not task.done():
        await asyncio.wait({task}, timeout=0.5)
        task.cancel()
    if not task.cancelled() and task.exception() is not None:
        log.warning("cluster task %s failed: %r", task.get_name(), task.exception())


def closing(*parts: tuple[str, object | None, str]) -> dict[str, Awaitable[Any]]:
    """Jobs for :meth:`Deadline.run`: ``{"closing <what>": obj.<method>()}``.

    One per ``(what, obj, method)`` whose ``obj`` is not ``None``.
    """
    return {
        f"closing {what}": getattr(obj, method)() for what, obj, method in parts if obj is not None
    }


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned job's outcome (so that asyncio does not log it)."""
    if not task.cancelled():
        task.exception()
