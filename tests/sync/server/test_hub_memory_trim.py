"""After rooms unload, the hub hands freed heap back to the system, at most once a second."""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import time
from pathlib import Path

from hubs import eventually
from websockets.asyncio.client import connect as ws_connect

from sync.server._memory import COLLECTION_SHARE, MemoryTrimmer, libc_trim, next_trim_delay
from sync.server.hub import Hub
from sync.server.limits import Limits


def test_the_next_trim_waits_an_interval_after_the_last() -> None:
    assert next_trim_delay(10.0, None, 1.0) == 0.0
    assert next_trim_delay(10.0, 9.75, 1.0) == 0.75
    assert next_trim_delay(10.0, 8.0, 1.0) == 0.0


def test_glibc_is_trimmed_on_linux() -> None:
    trim = libc_trim()
    assert (trim is not None) == sys.platform.startswith("linux")
    if trim is not None:
        trim()


async def test_calls_in_a_burst_are_folded_into_a_trim_and_a_trailing_one() -> None:
    calls: list[float] = []
    loop = asyncio.get_running_loop()
    trimmer = MemoryTrimmer(0.2, trim=lambda: calls.append(loop.time()), quiet=None)
    started = loop.time()
    for _ in range(50):
        trimmer.freed()
        await asyncio.sleep(0.01)
    burst = loop.time() - started
    await asyncio.sleep(0.5)
    await trimmer.close()
    # one at once, then at most one per 0.2 s, the last after the burst ended
    assert 2 <= len(calls) <= burst / 0.2 + 2, (burst, calls)
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(calls)), calls
    assert calls[-1] >= started + burst - 0.01, (burst, calls)
    assert trimmer.trims == len(calls)


async def test_a_failing_trim_is_logged_once_and_stops() -> None:
    def broken() -> None:
        raise OSError("no")

    trimmer = MemoryTrimmer(0.0, trim=broken, collect=lambda: None)
    trimmer.freed()
    await eventually(lambda: not trimmer.enabled)
    trimmer.freed()
    await trimmer.close()
    assert trimmer.trims == 0


async def test_unloading_rooms_trims(tmp_path: Path) -> None:
    async with Hub(port=0, db=tmp_path / "db", limits=Limits(room_idle_seconds=0.05)) as hub:
        memory = hub._registry.memory
        calls: list[int] = []
        memory._trim = lambda: calls.append(1)
        for room in ("a", "b", "c"):
            async with ws_connect(hub.url(room)) as ws:
                await ws.recv()
        await eventually(lambda: not hub.rooms and not hub._registry.unloading)
        await eventually(lambda: memory.trims >= 1, timeout=3)
        assert 1 <= len(calls) <= 3


async def test_a_quiet_spell_after_frees_collects_then_trims() -> None:
    events: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    trimmer = MemoryTrimmer(
        1.0,
        trim=lambda: events.append(("trim", loop.time())),
        quiet=0.2,
        collect=lambda: events.append(("gc", loop.time())),
    )
    for _ in range(10):  # a burst of unloads: no collection while it lasts
        trimmer.freed()
        last = loop.time()
        await asyncio.sleep(0.05)
    assert all(kind == "trim" for kind, _ in events)
    await eventually(lambda: trimmer.collections == 1, timeout=3)
    (collected,) = [at for kind, at in events if kind == "gc"]
    assert collected >= last + 0.19
    # a trim follows it at once, not an interval after the last trim
    await eventually(lambda: events[-1][0] == "trim", timeout=3)
    assert events[-1][1] - collected < 0.3, events
    await asyncio.sleep(0.4)
    await trimmer.close()
    assert [kind for kind, _ in events].count("gc") == 1, events


async def test_a_full_collection_that_freed_cycles_is_trimmed_after() -> None:
    calls: list[int] = []
    trimmer = MemoryTrimmer(0.0, trim=lambda: calls.append(1), quiet=None)
    trimmer.freed()
    await eventually(lambda: trimmer.trims == 1)
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1  # on another thread it would trim the same way
    await eventually(lambda: trimmer.trims == 2)
    await trimmer.close()
    assert trimmer._collected not in gc.callbacks  # removed on close
    gc.collect()
    await asyncio.sleep(0.05)
    assert trimmer.trims == 2 and len(calls) == 2


async def test_a_slow_collection_spaces_out_the_next() -> None:
    collected: list[float] = []
    loop = asyncio.get_running_loop()

    def slow_collect() -> None:
        collected.append(loop.time())
        time.sleep(0.01)  # the next waits at least COLLECTION_SHARE times as long

    trimmer = MemoryTrimmer(0.0, trim=lambda: None, quiet=0.05, collect=slow_collect)
    trimmer.freed()
    await eventually(lambda: len(collected) == 1, timeout=3)
    trimmer.freed()  # another quiet spell, 0.05 s later: its collection waits
    await asyncio.sleep(0.3)
    assert len(collected) == 1
    await eventually(lambda: len(collected) == 2, timeout=5)
    assert collected[1] - collected[0] >= 0.01 * COLLECTION_SHARE - 0.01
    await trimmer.close()
