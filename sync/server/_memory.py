"""Giving memory back to the operating system after rooms unload (glibc's ``malloc_trim``).

An unloaded room frees everything it held, but with glibc most of it stays in the
process as free heap: its document, its SQLite page cache and its writer are allocated
on worker threads, in glibc's per-thread arenas, and a thread arena returns memory to
the system only from its top, which some live allocation nearly always pins. Measured on
the soak of ``tests/sync/server/test_hub_soak.py`` (40 s, about 1,100 rooms churned):
the hub grew from 68 to 232 MB while its arenas held 163 MB free; ``malloc_trim(0)``
(which hands back the free pages of every arena) brought it to 82 MB, and the Python
collector found nothing to free. So after rooms unload, the hub trims, at most once per
``interval`` (a trim walks every arena: a few milliseconds for a few hundred MB), on a
worker thread, with a trailing trim after the last unload of a burst.

Elsewhere (macOS, musl, jemalloc via ``LD_PRELOAD``, Windows) ``malloc_trim`` is missing
or meaningless and :func:`libc_trim` returns ``None``: nothing is trimmed.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import platform
import sys
import time
from collections.abc import Callable

__all__ = ["MemoryTrimmer", "libc_trim", "next_trim_delay"]

log = logging.getLogger("crdt_state.hub")

Trim = Callable[[], object]


def libc_trim() -> Trim | None:
    """``malloc_trim(0)`` of glibc as a function, or ``None`` where there is no such thing."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


def next_trim_delay(now: float, last: float | None, interval: float) -> float:
    """Seconds to wait before the next trim, ``interval`` after the ``last`` (``None``: never).

    All times are ``time.monotonic()`` seconds; the result is never negative.
    """
    return 0.0 if last is None else max(0.0, last + interval - now)


class MemoryTrimmer:
    """Trims the process's free heap after memory was freed, at most once per ``interval``.

    Call :meth:`freed` (on the event loop's thread) whenever a lot of memory was just
    freed, e.g. a room unloaded. The trim runs on a worker thread, ``interval`` seconds
    after the previous one at the soonest; calls in between are folded into one trim.

    Args:
        interval: the least time between two trims, in seconds.
        trim: the trimming function (default: :func:`libc_trim`, when there is one).
    """

    def __init__(self, interval: float = 1.0, trim: Trim | None = None) -> None:
        self.interval = interval
        self.trims = 0
        """How many trims ran."""
        self._trim = trim if trim is not None else libc_trim()
        self._last: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._running: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        """True when this platform's allocator can be trimmed."""
        return self._trim is not None

    def freed(self) -> None:
        """Memory was freed: trim soon (event-loop thread only)."""
        if self._trim is None or self._timer is not None:
            return
        delay = next_trim_delay(time.monotonic(), self._last, self.interval)
        self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._timer = None
        if self._running is not None and not self._running.done():
            self.freed()  # the trim under way took longer than the interval: follow it
            return
        self._last = time.monotonic()
        self._running = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        assert self._trim is not None
        try:
            await asyncio.to_thread(self._trim)
            self.trims += 1
        except Exception:  # never worth failing the hub: the memory just stays
            log.exception("returning freed memory to the system failed")
            self._trim = None

    async def close(self) -> None:
        """Cancel the pending trim, wait for one under way."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)
