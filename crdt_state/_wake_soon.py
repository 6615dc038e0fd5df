"""Hand-overs asked for on an event loop's thread, done once per turn of the loop.

A group commit whose first item comes in while its writer waits hands the queue to
the writer, which wakes a sleeping thread (a futex wake and, on a small machine, the
GIL handed to it in the middle of the loop's work). The merges of one turn of an
event loop come in one after the other: :func:`later` lets the queues they fill hand
themselves over once that turn is done (``loop.call_soon``: the callbacks of the
current turn run first, then the writer gets them all at once), so that a turn's
merges go in one batch with one wake. A lone merge waits for nothing but the end of
its own turn. Off an event loop's thread (plain threads) nothing is put off.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

__all__ = ["later", "running"]


class _Turn:
    """The hand-overs one loop does on its next turn (touched on that loop's thread only)."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def run(self) -> None:
        pending, self.pending = self.pending, []
        for hand_over in pending:
            hand_over()


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turn] = weakref.WeakKeyDictionary()


def later(hand_over: Callable[[], None]) -> asyncio.AbstractEventLoop | None:
    """Call ``hand_over()`` on the running loop once its current turn is done.

    Returns:
        That loop; ``None`` when no loop runs on this thread (the caller hands over now).
    """
    loop = asyncio._get_running_loop()
    if loop is None:
        return None
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = _Turn()
    if not turn.pending:
        loop.call_soon(turn.run)
    turn.pending.append(hand_over)
    return loop


def running() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread (``None``: none)."""
    return asyncio._get_running_loop()
