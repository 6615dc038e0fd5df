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

Two more sources of freed heap are trimmed too, once a room was unloaded (a hub whose
rooms stay loaded frees little). Garbage the collector frees: the hub's collections of
the oldest generation are rare (``crdt-state hub`` raises the thresholds) and each may
free megabytes of objects kept by reference cycles (closed connections' protocols and
transports, until the hub broke the cycles it could), so a trim follows each one that
freed anything. And garbage no collection has found yet: once unloads stop for
``quiet`` seconds (a burst of unloads ended), the hub runs a full collection on the
loop's thread, then trims. Measured at the settled points of that soak (no room loaded,
2.5 s after the last unload), before these: RSS 69-79 MB, 60-64 MB after a collection
(1,100-2,300 objects in cycles, 2-6 ms) and a trim; whether the last collection came
before or after the settled point decided most of the spread between two rounds.

Elsewhere (macOS, musl, jemalloc via ``LD_PRELOAD``, Windows) ``malloc_trim`` is missing
or meaningless and :func:`libc_trim` returns ``None``: nothing is trimmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import platform
import sys
import time
from collections.abc import Callable

__all__ = ["COLLECTION_SHARE", "MemoryTrimmer", "libc_trim", "next_trim_delay"]

log = logging.getLogger("crdt_state.hub")

Trim = Callable[[], object]

COLLECTION_SHARE = 100
"""The next collection after a quiet spell waits this many times as long as the last took.

So it takes at most 1 % of the loop's time: a few milliseconds with no room loaded; in
a hub holding hundreds of rooms and connections a full collection takes tens of
milliseconds (measured: 40 ms for 400 rooms and their 400 connections, with the
clients' objects in the same process), then it runs at most once every few seconds.
"""


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

    From the first :meth:`freed` on (until :meth:`close`), a collection of the oldest
    generation that freed objects (on any thread) is followed by a trim the same way;
    and ``quiet`` seconds after the last :meth:`freed` call, the trimmer runs a full
    collection on the loop's thread (``collect``), then trims at once; not sooner after the
    previous such collection than :data:`COLLECTION_SHARE` times as long as that took.

    Args:
        interval: the least time between two trims, in seconds.
        trim: the trimming function (default: :func:`libc_trim`, when there is one).
        quiet: seconds without a :meth:`freed` call before the collection; ``None``:
            never collect.
        collect: the collection (default: :func:`gc.collect`).
    """

    def __init__(
        self,
        interval: float = 1.0,
        trim: Trim | None = None,
        *,
        quiet: float | None = 0.5,
        collect: Callable[[], object] = gc.collect,
    ) -> None:
        self.interval = interval
        self.quiet = quiet
        self.trims = 0
        """How many trims ran."""
        self.collections = 0
        """How many collections the trimmer ran (after unloads stopped)."""
        self._trim = trim if trim is not None else libc_trim()
        self._collect = collect
        self._last: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._running: asyncio.Task[None] | None = None
        self._freed_at = 0.0
        self._quiet_timer: asyncio.TimerHandle | None = None
        self._next_collection = 0.0  # monotonic time of the next collection at the soonest
        self._collecting = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def enabled(self) -> bool:
        """True when this platform's allocator can be trimmed."""
        return self._trim is not None

    def freed(self) -> None:
        """Memory was freed: trim soon, collect once quiet (event-loop thread only)."""
        if self._trim is None:
            return
        self._freed_at = time.monotonic()
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            gc.callbacks.append(self._collected)
        if self.quiet is not None and self._quiet_timer is None:
            self._quiet_timer = self._loop.call_later(self.quiet, self._when_quiet)
        self._soon()

    def _soon(self) -> None:
        """Trim ``interval`` after the last trim at the soonest (loop thread)."""
        if self._trim is None or self._timer is not None or self._loop is None:
            return
        delay = next_trim_delay(time.monotonic(), self._last, self.interval)
        self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _when_quiet(self) -> None:
        """Collect, then trim, once no :meth:`freed` call came for ``quiet`` seconds."""
        self._quiet_timer = None
        assert self.quiet is not None and self._loop is not None
        if self._trim is None:  # trimming failed meanwhile: nothing to collect for
            return
        now = time.monotonic()
        wait = max(self._freed_at + self.quiet, self._next_collection) - now
        if wait > 0:
            self._quiet_timer = self._loop.call_later(wait, self._when_quiet)
            return
        self.collections += 1
        self._collecting = True
        try:
            self._collect()  # frees what cycles held
        finally:
            self._collecting = False
        took = time.monotonic() - now
        self._next_collection = now + took * COLLECTION_SHARE
        # trim now, not an interval after the last trim: the quiet spell is the moment
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._start()

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """``gc.callbacks`` hook: trim after a collection of the oldest generation freed objects.

        Runs on whatever thread collected, inside the collection: it only schedules.
        """
        loop = self._loop
        if self._collecting or loop is None:  # after its own collection the trimmer trims
            return
        if phase == "stop" and info["generation"] == 2 and info["collected"]:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(self._soon)

    def _start(self) -> None:
        self._timer = None
        if self._running is not None and not self._running.done():
            self._soon()  # the trim under way took longer than the interval: follow it
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
        """Cancel the pending trim and collection, wait for a trim under way."""
        if self._loop is not None:
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self._collected)
            self._loop = None
        if self._quiet_timer is not None:
            self._quiet_timer.cancel()
            self._quiet_timer = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)
